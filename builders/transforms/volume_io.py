"""Opening a NIfTI volume safely: file objects (any file name), header claims checked before any voxel is read.

nibabel is never handed a path: the file is opened here (a ``str`` with surrogate escapes or ``bytes``,
whatever name the filesystem holds) and nibabel reads the header and the voxels through a file object
that stops at the bytes the header claims, so a ``.nii.gz`` is never decompressed past its claim
whatever its stream holds. Before a voxel is read, what the header claims (shape x itemsize from the
data offset) is compared with the file's size (uncompressed files) and with ``max_source_bytes``: a
claim the file cannot hold, or one over the limit, is a :class:`VolumeError` naming both numbers.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gzip
import io
import os
import shutil
import tempfile
import zlib
from collections.abc import Iterator

import nibabel as nib
import numpy as np
from nibabel.arrayproxy import ArrayProxy
from nibabel.filebasedimages import ImageFileError
from nibabel.spatialimages import HeaderDataError, HeaderTypeError, SpatialImage

# The most voxel bytes one source may declare (up to the volume read); mri_volumes' `max_source_bytes`.
DEFAULT_MAX_SOURCE_BYTES = 4 * 2**30
# Header and extensions of a compressed file: nothing past this is decompressed before the claim is checked.
HEADER_LIMIT = 64 * 2**20

# Exceptions nibabel (and gzip/zlib underneath it) raises for unreadable, truncated or foreign bytes.
READ_ERRORS = (ImageFileError, HeaderDataError, HeaderTypeError, EOFError, zlib.error, OSError, ValueError)
_NIFTI_MAGIC = {348: (344, (b"n+1\0",), nib.Nifti1Image), 540: (4, (b"n+2\0",), nib.Nifti2Image)}


class VolumeError(ValueError):
    """A volume file that cannot become an example; the message names the path and the problem."""


def shown(path: str | bytes | os.PathLike) -> str:
    """The path for messages: bytes a file name holds that are not UTF-8 written as ``\\xNN``."""
    text = os.fsdecode(path)
    try:
        return text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace").decode("utf-8")


class _BoundedReader(io.RawIOBase):
    """A seekable read-only view of `stream` that ends at byte `limit`: nothing past it is read or decompressed."""

    def __init__(self, stream, limit: int):
        super().__init__()
        self._stream = stream
        self._pos = 0
        self.limit = int(limit)

    @property
    def consumed(self) -> int:
        """How far the underlying stream has been read (decompressed): never past `limit`."""
        return self._stream.tell()

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self.limit}[whence]
        self._pos = max(0, base + int(offset))  # moved lazily: the stream seeks only when read
        return self._pos

    def _at(self, size: int) -> int:
        """Bytes that may be read from here (at most `size`), with the stream moved here."""
        size = self.limit - self._pos if size is None or size < 0 else min(size, self.limit - self._pos)
        if size > 0 and self._stream.tell() != self._pos:
            self._stream.seek(self._pos)
        return max(size, 0)

    def read(self, size: int = -1) -> bytes:
        size = self._at(size)
        data = self._stream.read(size) if size else b""
        self._pos += len(data)
        return data

    def readinto(self, buffer) -> int:
        view = memoryview(buffer).cast("B")
        size = self._at(len(view))
        done = 0
        while done < size:
            got = self._stream.readinto(view[done:size])
            if not got:
                break
            done += got
        self._pos += done
        return done


@dataclasses.dataclass
class OpenedImage:
    """A spatial image whose header passed the claim checks, its voxels still unread (proxy)."""

    img: SpatialImage
    path: str  # as shown in messages
    shape: tuple[int, ...]  # 3-D or 4-D
    volume_index: int

    @property
    def dataobj(self):
        """The array proxy (reads through the bounded file object)."""
        return self.img.dataobj

    @property
    def order(self) -> str:
        """'F' (NIfTI) or 'C': which spatial axis is slowest on disk."""
        return getattr(self.img.dataobj, "order", "F")

    def slicer(self, spatial: tuple) -> tuple:
        """The proxy slicer for a spatial block of the chosen volume."""
        return (*spatial, self.volume_index) if len(self.shape) == 4 else tuple(spatial)


def _nifti_class(reader: _BoundedReader):
    """Nifti1Image / Nifti2Image when the stream starts with a single-file NIfTI header, else None."""
    head = reader.read(348)
    if len(head) == 348:
        for order in ("<", ">"):
            size = int(np.frombuffer(head[:4], dtype=f"{order}i4")[0])
            if size in _NIFTI_MAGIC:
                at, magics, klass = _NIFTI_MAGIC[size]
                head += reader.read(size - len(head))
                reader.seek(0)
                return klass if head[at:at + 4] in magics else None
    reader.seek(0)
    return None


@contextlib.contextmanager
def _safe_name(path: str | bytes) -> Iterator[str]:
    """`path` as a str nibabel can take: itself, or a link to it under an ASCII name with the same suffix."""
    text = os.fsdecode(path)
    try:
        text.encode("utf-8")
        encodable = True
    except UnicodeEncodeError:
        encodable = False
    if encodable:
        yield text
        return
    name = os.path.basename(text)
    suffix = ".nii.gz" if name.lower().endswith(".nii.gz") else os.path.splitext(name)[1]
    folder = tempfile.mkdtemp(prefix="vidvol-volume-")
    try:
        link = os.path.join(folder, "volume" + suffix.encode("ascii", "replace").decode("ascii"))
        os.symlink(os.path.abspath(os.fsencode(path)), os.fsencode(link))
        yield link
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def check_claim(path: str, shape: tuple[int, ...], dtype: np.dtype, offset: int, volume_index: int, *,
                file_bytes: int | None, compressed: bool, max_source_bytes: int) -> int:
    """The byte where the voxels read end; VolumeError when the file cannot hold the claim or it is over the limit.

    The claim is the voxel bytes up to and including the volume read (for a 3-D scan: shape x itemsize).
    """
    volume_bytes = int(np.prod([int(n) for n in shape[:3]], dtype=object)) * int(dtype.itemsize)
    claimed = volume_bytes * (volume_index + 1)
    end = int(offset) + claimed
    what = f"header claims {'x'.join(str(int(n)) for n in shape)} {dtype.name} voxels"
    if len(shape) == 4 and shape[3] > 1:
        what += f" ({claimed} bytes up to volume {volume_index})"
    if file_bytes is not None and not compressed and end > file_bytes:
        raise VolumeError(
            f"{path}: {what} from byte {int(offset)}, so the file must hold {end} bytes, but it holds {file_bytes}: "
            "truncated, or a corrupt header")
    if compressed and offset > HEADER_LIMIT:
        raise VolumeError(f"{path}: header puts the voxels at byte {int(offset)}, past the {HEADER_LIMIT} bytes a "
                          "header and its extensions may take")
    if claimed > max_source_bytes:
        raise VolumeError(
            f"{path}: {what}, {claimed} bytes, over max_source_bytes {max_source_bytes}: not read (raise the "
            "config's max_source_bytes to build it)")
    return end


def _check_image(path: str, img: object, volume_index: int) -> tuple[int, ...]:
    """The shape of a usable 3-D/4-D image with a real voxel type and the chosen volume; else VolumeError."""
    if not isinstance(img, SpatialImage):
        raise VolumeError(f"{path}: expected a spatial image, nibabel opened it as {type(img).__name__}")
    shape = tuple(int(n) for n in img.shape)
    if not 3 <= len(shape) <= 4:
        raise VolumeError(f"{path}: expected a 3-D or 4-D image, got {len(shape)}-D shape {shape}")
    if min(shape) < 1:
        raise VolumeError(f"{path}: image has an empty dimension, shape {shape}")
    num_volumes = shape[3] if len(shape) == 4 else 1
    if not 0 <= volume_index < num_volumes:
        raise VolumeError(
            f"{path}: volume_index {volume_index} out of range for {num_volumes} volume(s) (shape {shape})"
        )
    on_disk = img.get_data_dtype()
    if on_disk.kind not in "biuf":
        raise VolumeError(f"{path}: unsupported voxel data type {on_disk} (expected integer or real float)")
    return shape


def _unreadable(path: str, err: BaseException, opened_as: str = "") -> VolumeError:
    """The skip for bytes nibabel cannot parse (a temporary name it was given shown as the real one)."""
    text = str(err).replace(opened_as, path) if opened_as else str(err)
    return VolumeError(f"{path}: not a readable NIfTI/nibabel image ({type(err).__name__}: {text})")


@contextlib.contextmanager
def open_image(path: str | bytes | os.PathLike, *, volume_index: int = 0,
               max_source_bytes: int = DEFAULT_MAX_SOURCE_BYTES) -> Iterator[OpenedImage]:
    """Opens a local volume file and checks its header's claim; its proxy reads only what is asked, up to the claim.

    Single-file NIfTI-1/-2 (``.nii``, ``.nii.gz``) is read through a bounded file object; any other
    format nibabel knows is opened by name (an ASCII link when the name is not UTF-8) and checked alike.
    """
    path = os.fspath(path)
    name = shown(path)
    if not os.path.exists(path):
        raise FileNotFoundError(f"{name}: volume file does not exist")
    if not os.path.isfile(path):
        raise VolumeError(f"{name}: expected a NIfTI file (.nii/.nii.gz), found a directory or special file")
    file_bytes = os.path.getsize(path)
    with contextlib.ExitStack() as stack:
        raw = stack.enter_context(open(path, "rb"))
        compressed = raw.read(2) == b"\x1f\x8b"
        raw.seek(0)
        stream = stack.enter_context(gzip.GzipFile(fileobj=raw, mode="rb")) if compressed else raw
        reader = _BoundedReader(stream, HEADER_LIMIT if compressed else file_bytes)
        try:
            klass = _nifti_class(reader)
        except READ_ERRORS as err:
            raise _unreadable(name, err) from err
        if klass is None:  # not a single-file NIfTI: nibabel finds the format by name
            stack.close()
            with _safe_name(path) as safe:
                try:
                    img = nib.load(safe)
                except Exception as err:  # any parse failure is this file's
                    raise _unreadable(name, err, safe) from err
                shape = _check_image(name, img, volume_index)
                dataobj = img.dataobj
                data_file = getattr(dataobj, "file_like", None)  # the voxels' file (a pair's .img, not its .hdr)
                sized = type(dataobj) is ArrayProxy and isinstance(data_file, str) and os.path.isfile(data_file)
                check_claim(name, shape, img.get_data_dtype(), int(getattr(dataobj, "offset", 0)), volume_index,
                            file_bytes=os.path.getsize(data_file) if sized else None,
                            compressed=str(data_file).endswith((".gz", ".mgz", ".bz2", ".zst")),
                            max_source_bytes=max_source_bytes)
                yield OpenedImage(img=img, path=name, shape=shape, volume_index=volume_index)
            return
        try:
            img = klass.from_file_map(klass.make_file_map({"image": reader}), mmap=False)
        except Exception as err:  # a hostile header: any parse failure is this file's
            raise _unreadable(name, err) from err
        shape = _check_image(name, img, volume_index)
        reader.limit = check_claim(name, shape, img.get_data_dtype(), int(img.dataobj.offset), volume_index,
                                   file_bytes=file_bytes, compressed=compressed, max_source_bytes=max_source_bytes)
        yield OpenedImage(img=img, path=name, shape=shape, volume_index=volume_index)


def read_float32(dataobj: object, slicer: tuple) -> np.ndarray:
    """Read ``dataobj[slicer]`` as native float32 with scl_slope/scl_inter applied, without a float64 copy."""
    if type(dataobj) is ArrayProxy:
        slope, inter = float(dataobj.slope), float(dataobj.inter)
        # A twin proxy on the same bytes with unit scaling reads only the requested raw voxels;
        # scaling is then applied in float32 (nibabel's own path upcasts to float64 first).
        raw_proxy = ArrayProxy(
            dataobj.file_like,
            (dataobj.shape, dataobj.dtype, dataobj.offset, 1.0, 0.0),
            order=dataobj.order,
            mmap=isinstance(dataobj.file_like, str),  # never memory-map (or seek to the end of) a file object
        )
        raw = raw_proxy[slicer]
        out = np.asarray(raw).astype(np.float32, order="C")  # native-endian C-order copy, also for '>f4'
        del raw
        if slope != 1.0:
            out *= np.float32(slope)
        if inter != 0.0:
            out += np.float32(inter)
        return out
    # Other proxies (MINC, PAR/REC) and in-memory arrays: let nibabel scale, then cast.
    return np.ascontiguousarray(np.asarray(dataobj[slicer]), dtype=np.float32)
