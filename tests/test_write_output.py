"""Outputs written in chunks (``sframe script -o`` of a large recording is never whole in
memory): all of them, or nothing when making them fails part way; through a link or
into a device as before."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from pysframe.cli.files import write_output


def chunks(count: int, fail_at: int | None = None) -> Iterator[bytes]:
    for index in range(count):
        if index == fail_at:
            raise RuntimeError("the unwinder failed")
        yield f"line {index}\n".encode()


def test_chunks_are_written_whole(tmp_path: Path) -> None:
    path = tmp_path / "out.txt"
    write_output(str(path), chunks(1000))
    assert path.read_bytes() == b"".join(chunks(1000))


def test_a_failure_part_way_leaves_the_old_file_and_no_temporary(tmp_path: Path) -> None:
    path = tmp_path / "out.txt"
    path.write_bytes(b"before\n")
    with pytest.raises(RuntimeError):
        write_output(str(path), chunks(1000, fail_at=500))
    assert path.read_bytes() == b"before\n"
    assert os.listdir(tmp_path) == ["out.txt"]


def test_chunks_go_through_a_link_to_its_target(tmp_path: Path) -> None:
    target, link = tmp_path / "target.txt", tmp_path / "link.txt"
    target.write_bytes(b"old contents, longer than the new ones" * 100)
    link.symlink_to(target)
    write_output(str(link), chunks(3))
    assert link.is_symlink() and target.read_bytes() == b"line 0\nline 1\nline 2\n"
