"""Discovery and containment on real folders: links, ignore rules, lock files."""
import os
from pathlib import Path

import pytest

from appliance.errors import InvalidArgument, PathOutsideRoots
from appliance.ingest.discover import FoundFile, Skipped, ignore_problems, printable, resolve_in_roots, walk

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


def _tree(root: Path, files: dict[str, str | bytes]) -> None:
    for rel, content in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content)


def _skips(root: Path, items, code: str = "ignored") -> dict[str, str]:
    return {s.path.relative_to(root).as_posix(): s.reason for s in items if isinstance(s, Skipped) and s.code == code}


def test_git_ignored_and_indexignored_files_are_excluded(tmp_path: Path) -> None:
    _tree(tmp_path, {".git/HEAD": "ref: refs/heads/main\n", ".gitignore": "build/\n*.log.md\n",
                     ".indexignore": "drafts/*\n!drafts/keep.md\n", "a.md": "x", "build/out.md": "x",
                     "x.log.md": "x", "drafts/d.md": "x", "drafts/keep.md": "x"})
    found = list(walk([tmp_path], EXT, report_skips=True))
    assert _names(tmp_path, found) == ["a.md", "drafts/keep.md"]
    reasons = _skips(tmp_path, found)
    assert reasons["build"] == "ignored by .gitignore"
    assert reasons["x.log.md"] == "ignored by .gitignore"
    assert reasons["drafts/d.md"] == "ignored by .indexignore"


def test_nested_gitignore_files_apply_below_their_directory_and_deeper_ones_win(tmp_path: Path) -> None:
    _tree(tmp_path, {".git/HEAD": "x", ".gitignore": "*.log.md\nnotes/\n/top-only.md\n",
                     "docs/.gitignore": "!keep.log.md\n/local/\ntop-only.md\n",
                     "a.log.md": "x", "keep.log.md": "x", "top-only.md": "x", "notes/n.md": "x",
                     "docs/b.log.md": "x", "docs/keep.log.md": "x", "docs/top-only.md": "x", "docs/local/l.md": "x",
                     "docs/deep/local/l.md": "x", "docs/deep/notes/n.md": "x", "docs/deep/keep.log.md": "x",
                     "docs/ok.md": "x"})
    found = list(walk([tmp_path], EXT, report_skips=True))
    # "!keep.log.md" in docs/.gitignore re-includes below docs/ only; "/local/" is anchored to docs/;
    # "notes/" (unanchored) matches at any depth; "/top-only.md" only at the top.
    assert _names(tmp_path, found) == ["docs/deep/keep.log.md", "docs/deep/local/l.md", "docs/keep.log.md",
                                       "docs/ok.md"]
    assert _skips(tmp_path, found) == {
        "a.log.md": "ignored by .gitignore", "keep.log.md": "ignored by .gitignore",
        "top-only.md": "ignored by .gitignore", "notes": "ignored by .gitignore",
        "docs/b.log.md": "ignored by .gitignore", "docs/top-only.md": "ignored by docs/.gitignore",
        "docs/local": "ignored by docs/.gitignore", "docs/deep/notes": "ignored by .gitignore"}


def test_an_ignored_directory_cannot_be_re_included_from_inside(tmp_path: Path) -> None:
    """git's rule: once `secret/` is excluded, neither `!` in the same file nor a deeper file brings files back."""
    _tree(tmp_path, {".gitignore": "secret/\n!secret/public.md\n", "secret/.gitignore": "!*\n",
                     "secret/public.md": "x", "secret/creds.md": "hunter2", "build/.keep.md": "x",
                     "logs/.gitignore": "*\n!.gitignore\n", "logs/today.md": "x", "a.md": "x"})
    found = list(walk([tmp_path], EXT, report_skips=True))
    assert _names(tmp_path, found) == ["a.md"]
    assert _skips(tmp_path, found) == {"secret": "ignored by .gitignore", "logs/today.md": "ignored by logs/.gitignore"}
    # Starting the walk inside the ignored directory (sync of a path) finds nothing either.
    assert list(walk([tmp_path], EXT, under=tmp_path / "secret")) == []
    assert [s.reason for s in walk([tmp_path], EXT, under=tmp_path / "secret", report_skips=True)] == [
        "ignored by .gitignore"]


def test_gitignore_applies_in_a_plain_folder_without_a_repository(tmp_path: Path) -> None:
    """The documented choice: a .gitignore is honoured whether or not there is a .git."""
    _tree(tmp_path, {".gitignore": "secret/\n", "secret/creds.md": "hunter2", "a.md": "x"})
    assert _names(tmp_path, walk([tmp_path], EXT)) == ["a.md"]


def test_info_exclude_of_the_repository_containing_the_root_applies(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    _tree(repo, {".git/info/exclude": "# local only\nprivate/\n*.draft.md\n", ".gitignore": "!keep.draft.md\n",
                 "docs/.gitignore": "b.md\n", "docs/a.md": "x", "docs/b.md": "x", "docs/c.draft.md": "x",
                 "docs/keep.draft.md": "x", "docs/private/p.md": "x"})
    found = list(walk([repo / "docs"], EXT, report_skips=True))
    assert _names(repo / "docs", found) == ["a.md", "keep.draft.md"]
    assert _skips(repo / "docs", found) == {"b.md": "ignored by .gitignore",
                                            "c.draft.md": f"ignored by {repo}/.git/info/exclude",
                                            "private": f"ignored by {repo}/.git/info/exclude"}
    # Without the .git directory the exclude file is not a repository's: only .gitignore files count.
    (repo / ".git" / "info" / "exclude").rename(tmp_path / "exclude")
    assert _names(repo / "docs", walk([repo / "docs"], EXT)) == ["a.md", "c.draft.md", "keep.draft.md", "private/p.md"]


def test_a_linked_work_tree_reads_info_exclude_from_the_common_git_dir(tmp_path: Path) -> None:
    _tree(tmp_path, {"main/.git/info/exclude": "secret/\n", "main/.git/worktrees/wt/commondir": "../..\n",
                     "wt/.git": f"gitdir: {tmp_path}/main/.git/worktrees/wt\n", "wt/secret/s.md": "x", "wt/a.md": "x"})
    assert _names(tmp_path / "wt", walk([tmp_path / "wt"], EXT)) == ["a.md"]


def test_a_repository_nested_in_a_root_adds_its_own_info_exclude(tmp_path: Path) -> None:
    _tree(tmp_path, {"a.md": "x", "vendor/lib/.git/info/exclude": "*.gen.md\n", "vendor/lib/x.gen.md": "x",
                     "vendor/lib/y.md": "x", "z.gen.md": "x"})
    assert _names(tmp_path, walk([tmp_path], EXT)) == ["a.md", "vendor/lib/y.md", "z.gen.md"]


def _unusable_rules(path: Path, kind: str) -> None:
    """A rules file that exists but cannot be used, even by root (chmod 000 does not stop root)."""
    if kind == "undecodable":
        path.write_bytes(b"secret/\n\xff\xfe\xfa\n")
    elif kind == "directory":
        path.mkdir()
    elif kind == "dangling link":
        path.symlink_to(path.parent / "no-such-rules-file")
    elif kind == "bad pattern":
        path.write_text("secret/\n!\n")


@pytest.mark.parametrize("kind", ["undecodable", "directory", "dangling link", "bad pattern"])
def test_an_unusable_nested_gitignore_skips_its_directory_loudly(tmp_path: Path, kind: str) -> None:
    _tree(tmp_path, {"a.md": "x", "proj/secret/creds.md": "hunter2", "proj/readme.md": "x", "other/o.md": "x"})
    _unusable_rules(tmp_path / "proj" / ".gitignore", kind)
    found = list(walk([tmp_path], EXT))
    assert _names(tmp_path, found) == ["a.md", "other/o.md"]
    (skip,) = [s for s in found if isinstance(s, Skipped)]
    assert skip.code == "ignore_rules_unreadable" and skip.path == tmp_path / "proj"
    assert "proj/.gitignore" in skip.reason and "not indexed" in skip.reason
    assert ignore_problems([tmp_path]) == [{"root": str(tmp_path), "skipped": str(tmp_path / "proj"),
                                            "reason": skip.reason}]


@pytest.mark.parametrize("rules", [".gitignore", ".indexignore", ".git/info/exclude"])
def test_unusable_rules_at_a_root_skip_the_whole_root(tmp_path: Path, rules: str) -> None:
    root, good = tmp_path / "root", tmp_path / "good"
    _tree(root, {"secret/creds.md": "hunter2", "a.md": "x", ".git/info/.keep": ""})
    _tree(good, {"g.md": "x"})
    _unusable_rules(root / rules, "undecodable")
    found = list(walk([root, good], EXT))
    assert _names(tmp_path, found) == ["good/g.md"]
    assert [(s.path, s.code) for s in found if isinstance(s, Skipped)] == [(root, "ignore_rules_unreadable")]
    assert rules in ignore_problems([root, good])[0]["reason"]
    # A sync of a path below the root is refused the same way.
    assert [s.code for s in walk([root], EXT, under=root / "secret")] == ["ignore_rules_unreadable"]
    assert ignore_problems([good]) == []


def test_rules_in_an_ignored_directory_do_not_matter(tmp_path: Path) -> None:
    _tree(tmp_path, {".gitignore": "junk/\n", "a.md": "x"})
    _tree(tmp_path, {"junk/x.md": "x"})
    _unusable_rules(tmp_path / "junk" / ".gitignore", "undecodable")
    assert _names(tmp_path, walk([tmp_path], EXT)) == ["a.md"]
    assert ignore_problems([tmp_path]) == []


@pytest.mark.skipif(os.geteuid() != 0, reason="chown to another uid needs root")
def test_a_repository_owned_by_another_user_keeps_its_rules(tmp_path: Path) -> None:
    """git refuses such a repository ("dubious ownership"); the rules must hold all the same."""
    root = tmp_path / "repo"
    _tree(root, {".git/HEAD": "ref: refs/heads/main\n", ".git/info/exclude": "*.local.md\n",
                 ".gitignore": "secret/\n", "secret/creds.md": "the password is hunter2", "notes.md": "x",
                 "me.local.md": "x"})
    for dirpath, dirnames, filenames in os.walk(root):
        for name in [*dirnames, *filenames, "."]:
            os.chown(os.path.join(dirpath, name), 12345, 12345, follow_symlinks=False)
    found = list(walk([root], EXT, report_skips=True))
    assert _names(root, found) == ["notes.md"]
    assert _skips(root, found) == {"secret": "ignored by .gitignore", "me.local.md": "ignored by .git/info/exclude"}


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
