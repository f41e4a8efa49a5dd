"""The book's and the course's tools: the book build, the student edition, the grader and the
authors' published workloads. Not part of the placement library; nothing in it is imported by it."""
