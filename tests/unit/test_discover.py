"""Discovery and containment on real folders: links, ignore rules, lock files."""
import os
import subprocess
from pathlib import Path

import pytest

from appliance.errors import InvalidArgument, PathOutsideRoots
from appliance.ingest.discover import FoundFile, Skipped, printable, resolve_in_roots, walk

EXT = frozenset({".md", ".txt"})


def _names(root: Path, items) -> list[str]:
    return sorted(i.path.relative_to(root).as_posix() for i in items if isinstance(i, FoundFile))


def test_walk_skips_dotfiles_lock_files_and_other_extensions(tmp_path: Path) -> None:
    (tmp_path / "a.md").write_text("x")
    (tmp_path / ".hidden.md").write_text("x")
    (tmp_path / "~$report.md").write_text("x")
    (tmp_path / "b.bin").write_text("x")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "c.TXT").write_text("x")
    assert _names(tmp_path, walk([tmp_path], EXT)) == ["a.md", "sub/c.TXT"]


def test_symlinks_inside_are_indexed_under_the_link_and_escaping_ones_skipped(tmp_path: Path) -> None:
    root, outside = tmp_path / "root", tmp_path / "outside"
    root.mkdir(), outside.mkdir()
    (outside / "secret.md").write_text("id_rsa")
    (root / "real.md").write_text("x")
    os.symlink(outside / "secret.md", root / "notes.md")
    os.symlink(root / "real.md", root / "alias.md")
    os.symlink(root, root / "loop")
    assert _names(root, walk([root], EXT)) == ["alias.md", "real.md"]
    with pytest.raises(PathOutsideRoots):
        resolve_in_roots(root / "notes.md", [root])
    path, r = resolve_in_roots(root / "alias.md", [root])
    assert path == root / "alias.md" and r == root


@pytest.mark.parametrize("bad", ["../x.md", "/etc/passwd", "/tmp/../etc/passwd"])
def test_paths_outside_roots_are_refused(tmp_path: Path, bad: str) -> None:
    root = tmp_path / "docs"
    root.mkdir()
    with pytest.raises(PathOutsideRoots):
        resolve_in_roots(bad, [root], cwd=root)


def test_prefix_sibling_is_not_inside(tmp_path: Path) -> None:
    (tmp_path / "proj").mkdir()
    (tmp_path / "project-secret").mkdir()
    (tmp_path / "project-secret" / "a.md").write_text("x")
    with pytest.raises(PathOutsideRoots):
        resolve_in_roots(tmp_path / "project-secret" / "a.md", [tmp_path / "proj"])


def test_relative_paths_refused_when_absolute_required(tmp_path: Path) -> None:
    with pytest.raises(InvalidArgument):
        resolve_in_roots("a.md", [tmp_path], cwd=tmp_path, require_absolute=True)


@pytest.mark.parametrize("must_exist", [True, False])
def test_unresolvable_paths_are_invalid_arguments_not_crashes(tmp_path: Path, must_exist: bool) -> None:
    """A symlink loop (pathlib's RuntimeError) and a name over NAME_MAX (OSError from exists())."""
    (tmp_path / "loopA").symlink_to(tmp_path / "loopB")
    (tmp_path / "loopB").symlink_to(tmp_path / "loopA")
    with pytest.raises(InvalidArgument, match="symbolic links form a loop"):
        resolve_in_roots(tmp_path / "loopA" / "x.md", [tmp_path], must_exist=must_exist)
    with pytest.raises(InvalidArgument, match="too long"):
        resolve_in_roots(tmp_path / ("a" * 300 + ".md"), [tmp_path], must_exist=must_exist)


def test_git_ignored_and_indexignored_files_are_excluded(tmp_path: Path) -> None:
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    (tmp_path / ".gitignore").write_text("build/\n*.log.md\n")
    (tmp_path / ".indexignore").write_text("drafts/*\n!drafts/keep.md\n")
    for rel in ["a.md", "build/out.md", "x.log.md", "drafts/d.md", "drafts/keep.md"]:
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("x")
    found = list(walk([tmp_path], EXT, report_skips=True))
    assert _names(tmp_path, found) == ["a.md", "drafts/keep.md"]
    reasons = {s.path.relative_to(tmp_path).as_posix(): s.reason for s in found if isinstance(s, Skipped)}
    assert reasons["build"] == "ignored by gitignore"
    assert reasons["drafts/d.md"] == "ignored by .indexignore"


def test_undecodable_names_are_skipped_with_a_reason(tmp_path: Path) -> None:
    (tmp_path / "ok.md").write_text("x")
    with open(os.path.join(os.fsencode(tmp_path), b"bad\xffname.md"), "wb") as fh:
        fh.write(b"x")
    (tmp_path / "new\nline.md").write_text("x")
    found = list(walk([tmp_path], EXT))
    assert _names(tmp_path, found) == ["new\nline.md", "ok.md"]
    skipped = [s for s in found if isinstance(s, Skipped)]
    assert [s.code for s in skipped] == ["invalid_name"]
    assert printable(skipped[0].path).endswith("bad\\xffname.md")


def test_very_deep_trees_are_reported_not_fatal(tmp_path: Path) -> None:
    deep = tmp_path
    for _ in range(300):
        deep = deep / "d"
    deep.mkdir(parents=True)
    (deep / "bottom.md").write_text("x")
    (tmp_path / "top.md").write_text("x")
    found = list(walk([tmp_path], EXT))
    assert _names(tmp_path, found) == ["top.md"]
    assert [s.code for s in found if isinstance(s, Skipped)] == ["too_deep"]
