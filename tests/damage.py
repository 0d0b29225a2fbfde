"""Damage to a stored file that its reader cannot see by itself, for the tests of the
checks that refuse it (the values' digest of :func:`ella.io.load_torch`)."""

from __future__ import annotations

from pathlib import Path


def flip_bits_in_tensor_data(path: Path, bits: int = 3) -> None:
    """Flip ``bits`` bits in the middle of the largest tensor record of the torch file at
    ``path`` (an uncompressed zip), where torch's reader does not look for damage."""
    import zipfile

    with zipfile.ZipFile(path) as archive:
        record = max((i for i in archive.infolist() if "/data/" in i.filename),
                     key=lambda i: i.file_size)  # fmt: skip
    raw = bytearray(path.read_bytes())
    head = record.header_offset
    name_len, extra_len = (int.from_bytes(raw[head + k : head + k + 2], "little") for k in (26, 28))
    start = head + 30 + name_len + extra_len + record.file_size // 2
    for b in range(bits):
        raw[start + 7 * b] ^= 1 << b
    path.write_bytes(bytes(raw))
