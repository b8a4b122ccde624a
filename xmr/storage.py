"""Where outputs live: a local (or shared-filesystem) folder, or an object store such as ``s3://``.

A cluster's nodes do not share a disk unless you give them one; an object store is the usual
answer. xmr's outputs that another node or a later step reads (D′, training runs, job folders)
take either a local path or a URI. Local paths stay :class:`pathlib.Path`; a URI becomes an
:class:`ObjectPath`, which offers the part of the ``Path`` interface xmr's writers and readers
use (``/``, ``name``, ``exists``, ``is_file``, ``iterdir``, ``glob``, ``read_bytes``,
``write_text``, ``open``, ``replace``, ...) over a `pyarrow filesystem
<https://arrow.apache.org/docs/python/filesystems.html>`_ — the filesystem layer Ray Train and
Ray Data use too, so ``storage_path="s3://…"`` means the same bucket to all of them.

pyarrow is imported on first use (the command line's option parsing imports this module).
Credentials and endpoints come from the environment as the AWS SDK reads them
(``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``, ``AWS_DEFAULT_REGION``, ``AWS_ENDPOINT_URL``
for an S3-compatible server, an instance profile on EC2); nothing secret is written anywhere.

Before a process first opens a bucket, :func:`check_reachable` asks the store's endpoint for an
answer with a short timeout, so that a store that cannot be reached is refused in seconds (one
line naming the endpoint and the variables that set it) rather than after the AWS SDK's retries
(20 s to minutes): commands check their output bucket this way before Ray starts. The endpoint
of ``s3://`` is ``AWS_ENDPOINT_URL_S3`` or ``AWS_ENDPOINT_URL`` (as pyarrow reads them), else
AWS's ``s3.<region>.amazonaws.com`` (``AWS_REGION`` / ``AWS_DEFAULT_REGION``); of ``http(s)://``
the URI's host. ``XMR_STORAGE_CONNECT_TIMEOUT`` (seconds, default 5) sets the wait; ``0`` turns
the check off. Other schemes are not checked.
"""

from __future__ import annotations

import fnmatch
import http.client
import io
import os
import posixpath
import ssl
import tempfile
import threading
from collections.abc import Iterator, Mapping
from functools import cache
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, TypeAlias
from urllib.parse import parse_qs, urlsplit

if TYPE_CHECKING:
    import pyarrow.fs as pafs


def is_uri(value: str | Path | ObjectPath) -> bool:
    """Whether ``value`` names an object store (``scheme://…``) rather than a local path."""
    if isinstance(value, ObjectPath):
        return True
    text = str(value)
    return "://" in text and not text.startswith("file://")


@cache
def _filesystem(scheme: str, bucket: str) -> pafs.FileSystem:
    """The pyarrow filesystem for ``scheme://bucket`` (one per process and bucket)."""
    import pyarrow.fs as pafs

    check_reachable(scheme, bucket)
    try:
        filesystem, _ = pafs.FileSystem.from_uri(f"{scheme}://{bucket}")
    except OSError as exc:  # S3: the bucket's region is looked up here (a request)
        raise UnreachableStorage(f"{scheme}://{bucket}", exc) from None
    return filesystem


class UnreachableStorage(ValueError):
    """An object store that cannot be reached (no network, no credentials, a bad endpoint): a
    one-line message with the store's first line of error, as bad input is reported."""

    def __init__(self, where: str, cause: BaseException) -> None:
        self.cause = cause
        reason = str(cause).splitlines()[0] if str(cause) else type(cause).__name__
        super().__init__(f"{where}: cannot reach the object store ({reason})")


CONNECT_TIMEOUT_ENV = "XMR_STORAGE_CONNECT_TIMEOUT"
"""The environment variable holding how long (seconds) :func:`check_reachable` waits for an
object store's endpoint to answer; ``0`` turns the check off."""
DEFAULT_CONNECT_TIMEOUT = 5.0
"""Seconds :func:`check_reachable` waits when :data:`CONNECT_TIMEOUT_ENV` is unset."""
S3_SETTINGS = (
    "AWS_ENDPOINT_URL / AWS_ENDPOINT_URL_S3 (an S3-compatible server) "
    "or AWS_REGION / AWS_DEFAULT_REGION (AWS)"
)
"""The variables that say where ``s3://`` is, as a refusal names them."""


def connect_timeout(environ: Mapping[str, str] | None = None) -> float:
    """Seconds to wait for an object store's endpoint: :data:`CONNECT_TIMEOUT_ENV` of
    ``environ`` (default: this process's), else :data:`DEFAULT_CONNECT_TIMEOUT`.

    >>> connect_timeout({"XMR_STORAGE_CONNECT_TIMEOUT": "1.5"}), connect_timeout({})
    (1.5, 5.0)

    Raises:
        ValueError: not a number of seconds, or negative.
    """
    environ = os.environ if environ is None else environ
    text = environ.get(CONNECT_TIMEOUT_ENV, "").strip()
    if not text:
        return DEFAULT_CONNECT_TIMEOUT
    try:
        seconds = float(text)
    except ValueError:
        seconds = -1.0
    if not seconds >= 0 or seconds == float("inf"):  # also NaN
        raise ValueError(
            f"{CONNECT_TIMEOUT_ENV} must be a number of seconds (0: no check), got {text!r}"
        )
    return seconds


def store_endpoint(
    scheme: str, bucket: str, environ: Mapping[str, str] | None = None
) -> tuple[str, str, int, str] | None:
    """Where a request for ``scheme://bucket`` goes: ``(scheme, host, port, said by)``, the last
    in words for a message; None for a scheme not checked (or an endpoint that does not parse:
    pyarrow then says what is wrong).

    >>> store_endpoint("s3", "b", {"AWS_ENDPOINT_URL": "http://127.0.0.1:9000"})
    ('http', '127.0.0.1', 9000, 'AWS_ENDPOINT_URL=http://127.0.0.1:9000')
    >>> store_endpoint("s3", "b", {"AWS_DEFAULT_REGION": "eu-west-1"})[1:3]
    ('s3.eu-west-1.amazonaws.com', 443)
    >>> store_endpoint("https", "example.org:8443", {})[:3]
    ('https', 'example.org', 8443)
    """
    environ = os.environ if environ is None else environ
    name, _, query = bucket.partition("?")
    if scheme in ("http", "https"):
        url, said_by = f"{scheme}://{name}", "the URI"
    elif scheme == "s3":
        options = {key: values[-1] for key, values in parse_qs(query).items()}
        variable = next(
            (v for v in ("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL") if environ.get(v)), None
        )
        if options.get("endpoint_override"):
            override = options["endpoint_override"]
            url = (
                override if "://" in override else f"{options.get('scheme', 'https')}://{override}"
            )
            said_by = "the URI's endpoint_override"
        elif variable is not None:
            url = environ[variable]
            url = url if "://" in url else f"https://{url}"
            said_by = f"{variable}={environ[variable]}"
        else:
            region = options.get("region") or environ.get("AWS_REGION")
            region = region or environ.get("AWS_DEFAULT_REGION")
            suffix = "amazonaws.com.cn" if (region or "").startswith("cn-") else "amazonaws.com"
            url = f"https://s3.{region}.{suffix}" if region else f"https://s3.{suffix}"
            said_by = "AWS S3, no AWS_ENDPOINT_URL set" + (f", region {region}" if region else "")
    else:
        return None
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return None
    return parts.scheme, parts.hostname, port or (443 if parts.scheme == "https" else 80), said_by


def check_reachable(scheme: str, bucket: str) -> None:
    """Refuse ``scheme://bucket`` when its endpoint (:func:`store_endpoint`) does not answer an
    HTTP request within :func:`connect_timeout` seconds: a store that cannot be reached is
    refused in seconds, before pyarrow's AWS SDK retries for tens of seconds or more. Any
    answer passes (even an error status: credentials and the bucket are checked later); ``0``
    seconds, or a scheme other than ``s3`` and ``http(s)``, skip the check.

    The request is ``HEAD /`` without credentials, direct as pyarrow's S3 client connects (no
    proxy); over HTTPS without checking the certificate (only whether the server answers;
    pyarrow's own connection checks it). Name lookup counts towards the wait.

    Raises:
        UnreachableStorage: one line naming the endpoint, where it was set and the variables
            that set it.
        ValueError: :data:`CONNECT_TIMEOUT_ENV` is not a number of seconds.
    """
    seconds = connect_timeout()
    endpoint = store_endpoint(scheme, bucket)
    if not seconds or endpoint is None:
        return
    protocol, host, port, said_by = endpoint
    outcome: list[BaseException | None] = []

    def ask() -> None:
        if protocol == "https":
            context = ssl.create_default_context()
            context.check_hostname = False  # whether it answers, not who it is
            context.verify_mode = ssl.CERT_NONE
            connection: http.client.HTTPConnection = http.client.HTTPSConnection(
                host, port, timeout=seconds, context=context
            )
        else:
            connection = http.client.HTTPConnection(host, port, timeout=seconds)
        try:
            connection.request("HEAD", "/")
            connection.getresponse().close()
            outcome.append(None)
        except (OSError, http.client.HTTPException) as exc:
            outcome.append(exc)
        finally:
            connection.close()

    # A thread bounds the whole wait: the socket timeout does not cover the name lookup.
    asking = threading.Thread(target=ask, name="xmr-storage-check", daemon=True)
    asking.start()
    asking.join(seconds)
    failure = outcome[0] if outcome else TimeoutError()
    if failure is None:
        return
    if isinstance(failure, TimeoutError):
        reason = f"no answer within {seconds:g} s"
    elif isinstance(failure, ConnectionRefusedError):
        reason = "connection refused"
    else:
        reason = (str(failure).splitlines() or [""])[0] or type(failure).__name__
    settings = f"; {S3_SETTINGS} set it" if scheme == "s3" else ""
    raise UnreachableStorage(
        f"{scheme}://{bucket}",
        ConnectionError(
            f"{protocol}://{host}:{port}: {reason}; endpoint from {said_by}{settings}; "
            f"{CONNECT_TIMEOUT_ENV}={seconds:g} s is the wait, 0 no check"
        ),
    )


class ObjectPath:
    """A file or folder in an object store, named by its URI (``s3://bucket/key``).

    Folders are key prefixes: ``mkdir`` is a no-op, a folder exists while it holds an object.
    Writes are whole objects (an upload appears complete or not at all), so ``replace`` after a
    temporary write is a copy; readers never see half a file.
    """

    __slots__ = ("key", "scheme")

    def __init__(self, uri: str) -> None:
        scheme, sep, rest = str(uri).partition("://")
        rest = rest.strip("/")
        if not sep or not scheme or not rest:
            raise ValueError(f"{uri}: not a URI like s3://bucket/folder")
        self.scheme = scheme.lower()
        self.key = posixpath.normpath(rest)

    # --- naming -----------------------------------------------------------------------------
    def __str__(self) -> str:
        return f"{self.scheme}://{self.key}"

    def __repr__(self) -> str:
        return f"ObjectPath({str(self)!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ObjectPath) and str(self) == str(other)

    def __hash__(self) -> int:
        return hash(str(self))

    def __truediv__(self, name: str | Path) -> ObjectPath:
        return ObjectPath(f"{self}/{name}")

    @property
    def name(self) -> str:
        return posixpath.basename(self.key)

    @property
    def stem(self) -> str:
        return Path(self.name).stem

    @property
    def suffix(self) -> str:
        return Path(self.name).suffix

    @property
    def parent(self) -> ObjectPath:
        head = posixpath.dirname(self.key)
        return ObjectPath(f"{self.scheme}://{head}") if head else self

    def with_name(self, name: str) -> ObjectPath:
        return self.parent / name

    def expanduser(self) -> ObjectPath:
        return self

    def resolve(self) -> ObjectPath:
        return self

    def as_uri(self) -> str:
        return str(self)

    @property
    def filesystem(self) -> pafs.FileSystem:
        """The pyarrow filesystem this path lives on (pass it with :attr:`path`)."""
        try:
            return _filesystem(self.scheme, self.key.split("/", 1)[0])
        except UnreachableStorage as exc:  # named by the bucket: name this path
            raise UnreachableStorage(str(self), exc.cause) from None

    @property
    def path(self) -> str:
        """The path within :attr:`filesystem` (``bucket/key``)."""
        return self.key

    # --- queries ----------------------------------------------------------------------------
    def _type(self) -> str:
        """``File``, ``Directory`` or ``NotFound``."""
        try:
            return self.filesystem.get_file_info(self.key).type.name
        except OSError as exc:
            raise UnreachableStorage(str(self), exc) from None

    def exists(self) -> bool:
        return self._type() != "NotFound"

    def is_file(self) -> bool:
        return self._type() == "File"

    def is_dir(self) -> bool:
        return self._type() == "Directory"

    def iterdir(self) -> Iterator[ObjectPath]:
        import pyarrow.fs as pafs

        selector = pafs.FileSelector(self.key, allow_not_found=True, recursive=False)
        for info in sorted(self.filesystem.get_file_info(selector), key=lambda i: i.path):
            yield ObjectPath(f"{self.scheme}://{info.path}")

    def glob(self, pattern: str) -> Iterator[ObjectPath]:
        """Children whose names match ``pattern`` (one level, as ``fnmatch``)."""
        return (p for p in self.iterdir() if fnmatch.fnmatchcase(p.name, pattern))

    # --- reading and writing ----------------------------------------------------------------
    def mkdir(self, parents: bool = False, exist_ok: bool = False) -> None:
        """Nothing to do: an object store's folders are the prefixes of its keys."""

    def open(self, mode: str = "rb", encoding: str | None = None) -> IO[Any]:
        """A file object: ``rb``/``r`` read the whole object, ``wb``/``w`` upload on close."""
        if mode in ("rb", "r"):
            data = io.BytesIO(self.read_bytes())
            return data if mode == "rb" else io.TextIOWrapper(data, encoding=encoding or "utf-8")
        if mode in ("wb", "w"):
            stream = self.filesystem.open_output_stream(self.key)
            if mode == "wb":
                return stream
            return io.TextIOWrapper(stream, encoding=encoding or "utf-8")
        raise ValueError(f"{self}: mode {mode!r} is not supported on an object store")

    def read_bytes(self) -> bytes:
        with self.filesystem.open_input_stream(self.key) as stream:
            return stream.read()

    def read_text(self, encoding: str = "utf-8") -> str:
        return self.read_bytes().decode(encoding)

    def write_bytes(self, data: bytes) -> int:
        with self.filesystem.open_output_stream(self.key) as stream:
            stream.write(data)
        return len(data)

    def write_text(self, text: str, encoding: str = "utf-8") -> int:
        return self.write_bytes(text.encode(encoding))

    def replace(self, target: ObjectPath) -> ObjectPath:
        """Move this object to ``target`` (a copy and a delete on S3)."""
        self.filesystem.move(self.key, target.key)
        return target

    def unlink(self, missing_ok: bool = False) -> None:
        if missing_ok and not self.exists():
            return
        self.filesystem.delete_file(self.key)


StoragePath: TypeAlias = Path | ObjectPath
"""A folder or file xmr writes to or reads from: local (``Path``) or in an object store."""


def as_path(value: str | Path | ObjectPath) -> StoragePath:
    """``value`` as given: a URI becomes an :class:`ObjectPath`, anything else a ``Path`` (not
    made absolute; :func:`storage_path` also resolves it)."""
    if isinstance(value, ObjectPath):
        return value
    return ObjectPath(str(value)) if is_uri(value) else Path(value)


def storage_path(value: str | Path | ObjectPath) -> StoragePath:
    """``value`` as a storage path: a URI becomes an :class:`ObjectPath`; a local path is
    made absolute (relative paths mean the working directory of the process that parsed them:
    the driver)."""
    path = as_path(value)
    if isinstance(path, ObjectPath):
        return path
    return Path(str(path).removeprefix("file:")).expanduser().resolve()


STORAGE_ENV = "XMR_STORAGE"
"""The environment variable naming the root of every command's default output folders: a folder
every node of a cluster reaches (an absolute path or ``s3://bucket/prefix``)."""


def default_output(folder: str | Path) -> StoragePath:
    """Where a command writes when its output flag is not given: ``folder`` under
    ``$XMR_STORAGE`` when that is set (``XMR_STORAGE=s3://bucket/xmr``:
    ``s3://bucket/xmr/xmr-jobs``), else in the working directory; absolute either way."""
    root = os.environ.get(STORAGE_ENV)
    return storage_path(root) / folder if root else storage_path(folder)


def cache_dir() -> Path:
    """The folder of xmr's local caches (the default ToyWorld, LLM responses):
    ``$XMR_CACHE_DIR``, else ``$XDG_CACHE_HOME/xmr``, else ``~/.cache/xmr``."""
    if "XMR_CACHE_DIR" in os.environ:
        return Path(os.environ["XMR_CACHE_DIR"])
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "xmr"


RAY_PACKAGE_PREFIX = "_ray_pkg_"
RAY_PACKAGE_PARENTS = ("runtime_resources", "working_dir_files")
"""Where Ray unpacks a job's ``--working-dir`` on each node, the job's working directory:
``<ray temp>/session_*/runtime_resources/working_dir_files/_ray_pkg_<hash>/`` (Ray 2.60's
``ray._private.runtime_env.working_dir``)."""


def ray_package_copy(path: StoragePath) -> Path | None:
    """The copy of a Ray job's ``--working-dir`` that the absolute path ``path`` lies in, None
    when it lies in none (or is in an object store).

    >>> ray_package_copy(Path("/tmp/ray/session_1/runtime_resources/working_dir_files/"
    ...                       "_ray_pkg_5a1f/xmr-jobs"))
    PosixPath('/tmp/ray/session_1/runtime_resources/working_dir_files/_ray_pkg_5a1f')
    >>> ray_package_copy(Path("/data/xmr-jobs")) is None
    True
    """
    if isinstance(path, ObjectPath):
        return None
    parts = Path(path).parts
    for index in range(len(RAY_PACKAGE_PARENTS), len(parts)):
        parents = parts[index - len(RAY_PACKAGE_PARENTS) : index]
        if parts[index].startswith(RAY_PACKAGE_PREFIX) and parents == RAY_PACKAGE_PARENTS:
            return Path(*parts[: index + 1])
    return None


def check_outside_ray_package(path: StoragePath, where: str, fix: str | None = None) -> None:
    """Refuse an output path inside a Ray job's copy of ``--working-dir``: that folder is
    replaced when the job is submitted again (a resumable output starts over), exists on one
    node only, and is deleted with Ray's session.

    ``where``: the flag (or variable) the path came from; ``fix``: what to do instead
    (default: give a shared path or set :data:`STORAGE_ENV`).

    Raises:
        ValueError: one line naming ``where``.
    """
    if ray_package_copy(path) is None:
        return
    fix = fix or (
        f"give a path every node shares (s3://… or a shared filesystem) or set {STORAGE_ENV} to one"
    )
    raise ValueError(
        f"{where} {path} is inside Ray's copy of the job's --working-dir, which the next "
        f"submission replaces and only this node has: {fix}"
    )


def filesystem_and_path(target: StoragePath) -> tuple[pafs.FileSystem | None, str]:
    """``(filesystem, path)`` for pyarrow and Ray APIs that take both (None for a local path)."""
    if isinstance(target, ObjectPath):
        return target.filesystem, target.path
    return None, str(target)


def write_atomic(path: StoragePath, data: bytes | str) -> None:
    """Write ``data`` (``str`` as UTF-8) to ``path`` so that no reader ever sees part of it: a
    local file is written to a temporary file beside it, flushed to disk and renamed into place
    (concurrent writers each rename a whole file; the last one wins); an object appears whole
    when its single upload completes."""
    payload = data.encode("utf-8") if isinstance(data, str) else data
    if isinstance(path, ObjectPath):
        path.write_bytes(payload)
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(handle, "wb") as out:
            out.write(payload)
            out.flush()
            os.fsync(out.fileno())
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def put_folder(local: Path, target: StoragePath) -> None:
    """Move the finished local folder ``local`` to ``target``: a rename when ``target`` is local
    (the same filesystem), else an upload of every file (pyarrow's ``copy_files``) and the
    local folder removed."""
    if not isinstance(target, ObjectPath):
        local.replace(target)
        return
    import shutil

    import pyarrow.fs as pafs

    pafs.copy_files(
        str(local),
        target.path,
        source_filesystem=pafs.LocalFileSystem(),
        destination_filesystem=target.filesystem,
    )
    shutil.rmtree(local)


def check_bucket(target: StoragePath, flag: str) -> None:
    """Refuse an object-store path whose bucket does not exist or cannot be reached (a local
    path passes): for commands to call before they plan anything or start Ray, as a write into
    a missing bucket fails only at its first upload.

    Raises:
        ValueError: one line naming ``flag``.
    """
    if not isinstance(target, ObjectPath):
        return
    import pyarrow as pa

    bucket = target.path.split("/", 1)[0]
    try:
        found = target.filesystem.get_file_info(bucket).type.name != "NotFound"
    except UnreachableStorage as exc:
        raise ValueError(f"{flag} {exc}") from None
    except (OSError, pa.ArrowException) as exc:
        raise ValueError(f"{flag} {UnreachableStorage(str(target), exc)}") from None
    if not found:
        raise ValueError(
            f"{flag} {target}: bucket {target.scheme}://{bucket} does not exist (create it first)"
        )
