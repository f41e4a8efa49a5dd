"""The files a command reads and writes: only regular files, read up to a stated size, replaced
atomically.

Reading (`read_input`) opens without blocking and looks at what it opened before reading a byte:
a FIFO with no writer, ``/dev/zero``, a directory or a socket is refused in one line instead of
hanging or filling memory, and a file over `MAX_INPUT_BYTES` is refused by its size.

Writing (`write_atomic`) never leaves a half-written or foreign file behind:

* the new content goes to an unnamed file in the output's folder (Linux ``O_TMPFILE``) that gets a
  name only for the instant between ``linkat`` and the ``rename`` over the output; a process
  killed while writing, even by SIGKILL, leaves nothing. Where ``O_TMPFILE`` is missing, a
  visible ``.NAME.XXXXXXXX.tmp`` beside the output takes its place; it is removed on any error,
  on Ctrl-C and on SIGTERM (the command line turns SIGTERM into an exception), and only a
  SIGKILL or a crash of the machine can leave one (safe to delete);
* an output that exists and is not a regular file (``/dev/null``, a FIFO, a folder) is refused:
  renaming over it would replace the device node itself;
* a symbolic link is written *through*: its target is replaced atomically, the link stays;
* a replaced file keeps its permission bits (and, for root, its owner); a new file gets
  ``0666`` less the umask, like any other program's output.

The command line also refuses an output that is one of the command's inputs or lies in an input
folder (`check_apart`).
"""

from __future__ import annotations

import errno
import os
import secrets
import stat
import tempfile
from pathlib import Path
from typing import BinaryIO, Callable

from .errors import GraphError, LimitError, UsageError

#: The largest input file read, in bytes (1 GiB: a native graph of a few million nodes).
MAX_INPUT_BYTES = 1 << 30

_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


def kind_of(mode: int) -> str:
    """What a file of this ``st_mode`` is, in words (``"a regular file"``, ``"a FIFO"``, ...)."""
    return next((name for test, name in _KINDS if test(mode)), "a regular file" if stat.S_ISREG(mode)
                else "a special file")


def read_input(path: str | os.PathLike, limit: int = MAX_INPUT_BYTES) -> bytes:
    """The bytes of the regular file ``path``, at most ``limit`` of them.

    Raises
    ------
    GraphError
        The file cannot be opened or is not a regular file (checked before reading).
    LimitError
        The file is larger than ``limit`` bytes.

    Examples
    --------
    >>> read_input("/dev/zero")
    Traceback (most recent call last):
    ...
    devplace_lite.errors.GraphError: /dev/zero: not a regular file (a character device)
    """
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOCTTY", 0)
    try:
        fd = os.open(path, flags)  # O_NONBLOCK: opening a FIFO with no writer must not wait
    except OSError as e:
        raise GraphError(f"cannot read {path}: {e.strerror or e}") from None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or st.st_size > limit:
        os.close(fd)
        if not stat.S_ISREG(st.st_mode):
            raise GraphError(f"{path}: not a regular file ({kind_of(st.st_mode)})")
        raise LimitError(f"{path}: {st.st_size} bytes, over the {limit} bytes an input may have")
    with os.fdopen(fd, "rb") as f:
        try:
            data = f.read(limit + 1)
        except OSError as e:
            raise GraphError(f"cannot read {path}: {e.strerror or e}") from None
    if len(data) > limit:  # the file grew while we read it
        raise LimitError(f"{path}: over the {limit} bytes an input may have")
    return data


def same_file(a: str | os.PathLike, b: str | os.PathLike) -> bool:
    """Whether two paths name one file (through links and hard links: same device and inode)."""
    try:
        sa, sb = os.stat(a), os.stat(b)
    except OSError:
        return False
    return (sa.st_dev, sa.st_ino) == (sb.st_dev, sb.st_ino)


def inside(path: str | os.PathLike, folder: str | os.PathLike) -> bool:
    """Whether ``path`` (once written: through links, ``..`` resolved) lies in ``folder`` or below."""
    real, top = os.path.realpath(path), os.path.realpath(folder)
    return os.path.commonpath([real, top]) == top


def check_apart(out: str | os.PathLike, inputs: list[str | os.PathLike]) -> None:
    """Refuse an output that is one of ``inputs`` (the same file through any link) or lies in an
    input that is a folder (``grade``'s submissions: a sheet there could replace a submission)."""
    for src in inputs:
        if same_file(src, out):
            raise UsageError(f"output {out} is the input {src}; write to another file")
        if os.path.isdir(src) and inside(out, src):
            raise UsageError(f"output {out} is inside the input folder {src}; write outside it")


def check_output(path: str | os.PathLike) -> Path:
    """The file ``path`` will really replace (a symlink's target), refused when it names no file
    (empty, or ending in ``/``, ``.`` or ``..``: ``realpath`` would quietly turn ``out/`` into
    ``out``), when it exists and is not a regular file, or when its folder does not exist."""
    text = os.fspath(path)
    if os.path.basename(text) in ("", ".", ".."):
        shown = f"'{text}'" if text else "'' (an empty name)"
        raise UsageError(f"cannot write {shown}: an output must name a file, not a folder")
    target = Path(os.path.realpath(path))
    try:
        st = os.stat(target)
    except FileNotFoundError:
        if not target.parent.is_dir():
            raise UsageError(f"cannot write {path}: folder {target.parent} does not exist") from None
        return target
    except OSError as e:
        raise UsageError(f"cannot write {path}: {e.strerror or e}") from None
    if not stat.S_ISREG(st.st_mode):
        raise UsageError(f"{path}: not a regular file ({kind_of(st.st_mode)}); refusing to replace it")
    return target


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _open_unnamed(folder: Path) -> int | None:
    """An unnamed file in ``folder`` (Linux ``O_TMPFILE``), or None where the system has none."""
    if not hasattr(os, "O_TMPFILE") or not os.path.isdir("/proc/self/fd"):
        return None
    try:
        return os.open(folder, os.O_TMPFILE | os.O_WRONLY | getattr(os, "O_CLOEXEC", 0), 0o600)
    except OSError as e:
        if e.errno in (errno.EOPNOTSUPP, errno.EISDIR, errno.EINVAL, errno.ENOENT):
            return None  # no O_TMPFILE on this kernel or file system
        raise


def _name_unnamed(fd: int, target: Path) -> Path:
    """Link the unnamed file ``fd`` into ``target``'s folder under a fresh temporary name."""
    temp = target.with_name(f".{target.name}.{secrets.token_hex(4)}.tmp")
    folder = os.open(target.parent, os.O_RDONLY | os.O_DIRECTORY | getattr(os, "O_CLOEXEC", 0))
    try:  # a folder descriptor makes os.link call linkat(AT_SYMLINK_FOLLOW), which /proc/self/fd needs
        os.link(f"/proc/self/fd/{fd}", temp.name, dst_dir_fd=folder, follow_symlinks=True)
    finally:
        os.close(folder)
    return temp


def write_atomic(path: str | os.PathLike, write: Callable[[BinaryIO], None]) -> None:
    """Replace ``path`` by what ``write(f)`` writes to a binary file object, atomically.

    Readers see the old file or the new one, never a part; on any error (Ctrl-C and SIGTERM
    included) the old file stays and no temporary file is left (see the module docstring).

    Raises
    ------
    UsageError
        ``path`` exists and is not a regular file, or its folder does not exist.
    OSError
        Writing failed (disk full, no permission); nothing was replaced.

    Examples
    --------
    >>> import tempfile, os
    >>> folder = tempfile.mkdtemp()
    >>> write_atomic(os.path.join(folder, "a.txt"), lambda f: f.write(b"hello"))
    >>> open(os.path.join(folder, "a.txt")).read(), os.listdir(folder)
    ('hello', ['a.txt'])
    """
    target = check_output(path)
    try:
        _replace(target, write)
    except OSError as e:  # name the output, not the temporary file or the folder descriptor
        raise OSError(e.errno, f"cannot write: {e.strerror}", str(path)) from None


def write_text_atomic(path: str | os.PathLike, text: str) -> None:
    """`write_atomic` of ``text`` as UTF-8 (a grade sheet, a generated script)."""
    write_atomic(path, lambda f: f.write(text.encode("utf-8")))


def _replace(target: Path, write: Callable[[BinaryIO], None]) -> None:
    try:
        old = os.stat(target)
    except FileNotFoundError:
        old = None
    temp = None  # the visible temporary file, while there is one
    try:
        fd = _open_unnamed(target.parent)
        if fd is None:
            fd, name = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
            temp = Path(name)
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            mode = stat.S_IMODE(old.st_mode) if old else 0o666 & ~_umask()
            if hasattr(os, "fchmod"):
                os.fchmod(fd, mode)
            if old and hasattr(os, "geteuid") and os.geteuid() == 0 and (old.st_uid, old.st_gid) != (0, 0):
                os.fchown(fd, old.st_uid, old.st_gid)  # root replacing another user's file keeps its owner
            os.fsync(fd)
            if temp is None:  # a name for the rename, for the briefest moment
                temp = _name_unnamed(fd, target)
        if not hasattr(os, "fchmod"):
            os.chmod(temp, mode)
        os.replace(temp, target)
        temp = None
    finally:
        if temp is not None:
            temp.unlink(missing_ok=True)
