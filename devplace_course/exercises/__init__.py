"""Exercises that grade themselves.

In a chapter, after writing the function an exercise asks for::

    from devplace_course.exercises import check
    res = check("01.2", my_max_load)

`check` runs the function against the reference solution on seeded random instances (the
same ones every year for a given ``seed``) and prints a short report: ``passed``, or the first
instance that fails (how to rebuild it), the expected value against the returned one, a
diagnosis when the answers fit a typical mistake, and a hint. It returns a `CheckResult`
with ``passed``, ``score`` (share of instances right), ``status`` and ``message``. A function
that raises ``NotImplementedError`` (the stub of the student edition) is reported as *not
attempted*, and nothing is raised, so the rest of the notebook still runs. The function gets
``timeout`` seconds (60 by default); an endless loop ends the check with status ``timeout``.

Instructors grade a folder of submissions with ``devplace grade DIR --seed-file SECRET`` (see
`devplace_course.exercises.grading`): each submission runs in a bubblewrap sandbox on instances
drawn from the instructor's secret seed, and is checked outside it. Each submission defines the
functions under the names listed by ``devplace grade --list`` (the ``name`` of each exercise below).

Adding an exercise
------------------
Exercises live in one module per chapter, ``devplace_course/exercises/chNN.py``, imported on
demand: nothing else needs editing. To add exercise ``x`` of chapter ``NN``:

1. Write the reference solution as a function of plain arguments (graphs, clusters, arrays,
   numbers) in ``chNN.py``, or import it from the library.
2. Write ``cases(rng, i) -> Case``: the ``i``-th instance from a seeded ``numpy`` generator.
   Put the chapter's worked example and edge cases at ``i = 0, 1, ...``, random ones after;
   give each `Case` a ``text`` that rebuilds it (``graph = generate("cells", 12, seed=3); ...``),
   since that is what a learner sees when the instance fails. Keep instances small: a check
   should take well under a second.
3. Register it::

       register(id="NN.x", name="my_function", title="one line",
                reference=reference, cases=cases,
                compare=close(rtol=1e-9),        # or exact(), or your own comparator
                hint="what to look at first",
                slips=slips,                     # case -> [(value of a typical mistake, message)]
                fixed=2,                         # instances 0, 1 are worked examples
                forbidden=("devplace_lite.cost:max_load",),  # library answers: calling them is a copy
                n=20)                            # instances per check

   ``slips`` make the instances discriminating: each random instance is drawn again until
   every typical mistake gets it wrong, so a wrong idea fails nearly all of them, and a wrong
   answer equal to a slip's value is diagnosed with its message. ``diagnose(case, expected,
   got)`` recognises mistakes that are not values (an answer one off, a wrong shape).

   ``name`` is the function the learner writes, and the name graders look for; it must be
   unique across the book. A comparator returns ``None`` when the answer is right, else one
   line saying how it differs. Compare objective values within a tolerance, never solution
   vectors (ties break differently).
4. In the chapter's Exercises section: a code cell tagged ``solution`` (add ``hide-input`` so
   the book folds it) that defines the function, then an untagged cell
   ``res_x = check("NN.x", my_function)``, then an assert cell tagged
   ``[remove-cell, solution]``: ``assert res_x.passed``. The student edition
   (``make student``) replaces the solution cell by a stub that raises
   ``NotImplementedError`` and drops the assert, so the check reports "not attempted".
5. ``tests/test_exercises.py`` then checks the new exercise automatically: the reference
   passes, a stub is not attempted, a wrong answer fails with a message, and the chapter's
   solution cell defines the registered name.
"""

from .core import REGISTRY, Case, CheckResult, Exercise, check, close, exact, exercises, get, instance, random_topological_order, register

__all__ = ["Case", "CheckResult", "Exercise", "REGISTRY", "check", "close", "exact", "exercises", "get", "instance",
           "random_topological_order", "register"]
