"""The docs stay true: every command a code block of README.md or docs/*.md shows exists, and every
relative link resolves.

A command is checked by what it calls: `python -m stages <stage>` by the stage's `--help` (in process,
through Typer's runner) listing each flag shown; `dvc <sub> [<subsub>]` by `dvc ... --help` succeeding and
listing each flag shown (help text cached per subcommand); `python -m tools.<module>` by the module
existing and naming each flag; a path under scripts/ or tools/ (`bash scripts/x.sh`, `python scripts/x.py`,
`sbatch scripts/x.sbatch`) by the file existing and naming each flag (a shell wrapper's flags may live in
its same-named .py). Other programs (git, pip, pytest, sbatch itself) are not the project's and are not
checked. A link is checked by its file existing, and its `#anchor` by a heading of that Markdown file
with that GitHub slug.
"""

from __future__ import annotations

import functools
import importlib.util
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from pipeline.errors import PipelineError

ROOT = Path(__file__).resolve().parents[1]
SHELL_BLOCK = re.compile(r"^```(?:bash|sh|shell|console)\n(.*?)^```", re.M | re.S)
ANY_BLOCK = re.compile(r"^```.*?^```", re.M | re.S)
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
FLAG = re.compile(r"^--?[A-Za-z][\w-]*")
SEPARATORS = {"&&", "||", ";", "|", "&"}
SHELL_KEYWORDS = {"while", "until", "if", "then", "else", "do", "!", "time", "exec"}


def doc_files(root: Path = ROOT) -> list[Path]:
    return [root / "README.md", *sorted((root / "docs").glob("*.md"))]


# ---- commands -------------------------------------------------------------------------------------


def shell_commands(text: str) -> list[list[str]]:
    """Each simple command of the shell code blocks, as words: continuation lines joined, comments,
    redirections and leading VAR=value assignments dropped; `<placeholder>` becomes one word and an
    optional `[--flag a|b]` its words."""
    commands = []
    for block in SHELL_BLOCK.findall(text):
        for line in block.replace("\\\n", " ").splitlines():
            line = re.sub(r"<[^<>]*>", "PLACEHOLDER", line)
            line = re.sub(r"\[([^\]'\"]*)\]", lambda m: " " + m.group(1).replace("|", " ") + " ", line)
            lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
            lexer.whitespace_split, lexer.commenters = True, "#"
            commands += _split_on_separators(list(lexer))
    return [command for command in commands if command]


def _split_on_separators(words: list[str]) -> list[list[str]]:
    commands, current, skip_next = [], [], False
    for word in words:
        if skip_next:
            skip_next = False
        elif word in SEPARATORS:
            commands.append(current)
            current = []
        elif set(word) <= set("<>&") and set(word) & set("<>"):  # a redirection: drop it and its target
            skip_next = True
        else:
            current.append(word)
    commands.append(current)
    return [_without_assignments(command) for command in commands]


def _without_assignments(words: list[str]) -> list[str]:
    """The command itself: leading VAR=value assignments and shell keywords (`while`, `do`, ...) dropped."""
    while words and (re.fullmatch(r"[A-Za-z_]\w*=\S*", words[0]) or words[0] in SHELL_KEYWORDS):
        words = words[1:]
    return words


def _flags(words: list[str]) -> list[str]:
    return [FLAG.match(word).group(0) for word in words if FLAG.match(word)]


def _named(flag: str, text: str) -> bool:
    return re.search(rf"(?<![\w-]){re.escape(flag)}(?![\w-])", text) is not None


@functools.lru_cache(maxsize=None)
def dvc_help(path: tuple[str, ...]) -> tuple[int, str]:
    shown = subprocess.run([sys.executable, "-m", "dvc", *path, "--help"], capture_output=True, text=True, cwd=ROOT)
    return shown.returncode, shown.stdout + shown.stderr


def _usage_depth(help_text: str) -> int:
    """How many words follow `dvc` in the usage line (`usage: dvc experiments run [-h] ...` → 2)."""
    match = re.search(r"usage: dvc((?: [a-z][\w-]*)*)", help_text)
    return len(match.group(1).split()) if match else 0


def check_dvc(words: list[str]) -> list[str]:
    rest = words[1:]
    bare = [word for word in rest[:2] if not word.startswith("-")]
    if not bare:
        return []  # `dvc --version` and the like
    if len(bare) == 2 and rest[:2] == bare:
        code, text = dvc_help(tuple(bare))
        if code == 0 and _usage_depth(text) == 2:
            return _unlisted(words, ("dvc", *bare), rest[2:], text)
        if code != 0 and "invalid choice" in text:
            return [f"`{' '.join(words)}`: `dvc {' '.join(bare)}` is not a dvc command"]
    code, text = dvc_help((bare[0],))
    if code != 0 or rest[0] != bare[0]:
        return [f"`{' '.join(words)}`: `dvc {bare[0]}` is not a dvc command"]
    return _unlisted(words, ("dvc", bare[0]), rest[1:], text)


def _unlisted(words: list[str], called: tuple[str, ...], arguments: list[str], help_text: str) -> list[str]:
    return [f"`{' '.join(words)}`: `{' '.join(called)} --help` does not list {flag}"
            for flag in _flags(arguments) if not _named(flag, help_text)]


@functools.lru_cache(maxsize=None)
def stage_help(stage: str) -> tuple[int, str]:
    from typer.testing import CliRunner

    from stages.cli import app

    shown = CliRunner().invoke(app, [stage, "--help"] if stage else ["--help"], terminal_width=200)
    return shown.exit_code, shown.output


def check_python_module(words: list[str], module: str, arguments: list[str]) -> list[str]:
    if module == "stages":
        stage = arguments[0] if arguments and not arguments[0].startswith("-") else ""
        code, text = stage_help(stage)
        if code != 0:
            return [f"`{' '.join(words)}`: `python -m stages {stage} --help` fails"]
        return _unlisted(words, ("python", "-m", "stages", stage), arguments, text)
    if module.split(".")[0] != "tools":
        return []  # pytest, pip, dvc's own module: not the project's
    spec = importlib.util.find_spec(module)
    if spec is None or spec.origin is None:
        return [f"`{' '.join(words)}`: no module {module}"]
    return _unnamed(words, arguments, Path(spec.origin).read_text(encoding="utf-8"), module)


def _unnamed(words: list[str], arguments: list[str], source: str, where: str) -> list[str]:
    return [f"`{' '.join(words)}`: {where} does not define {flag}" for flag in _flags(arguments) if not _named(flag, source)]


def check_project_file(words: list[str], index: int, root: Path) -> list[str]:
    """A scripts/ or tools/ path (`bash scripts/x.sh --flag`): the file exists and names each flag
    after it (a shell wrapper's flags may be its same-named .py's)."""
    path = root / words[index]
    if not path.is_file():
        return [f"`{' '.join(words)}`: {words[index]} does not exist"]
    sources = [path, path.with_suffix(".py")]
    text = "".join(source.read_text(encoding="utf-8") for source in sources if source.is_file())
    return _unnamed(words, words[index + 1 :], text, words[index])


def check_command(words: list[str], root: Path = ROOT) -> list[str]:
    """What is wrong with one command shown in the docs (empty when it exists as shown)."""
    words = _without_assignments(words)
    if not words:
        return []
    program = Path(words[0]).name
    if program == "dvc":
        return check_dvc(words)
    if program.startswith("python") and len(words) > 2 and words[1] == "-m":
        return check_python_module(words, words[2], words[3:])
    for index, word in enumerate(words):
        if re.match(r"(\./)?(scripts|tools)/", word):
            return check_project_file(words, index, root)
    return []


def command_problems(path: Path, root: Path = ROOT) -> list[str]:
    text = path.read_text(encoding="utf-8")
    return [f"{path.relative_to(root)}: {problem}" for words in shell_commands(text) for problem in check_command(words, root)]


# ---- links ----------------------------------------------------------------------------------------


def github_slug(heading: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def anchors(markdown: str) -> set[str]:
    found, seen = set(), {}
    for heading in re.findall(r"^#{1,6} (.+)$", ANY_BLOCK.sub("", markdown), re.M):
        slug = github_slug(heading)
        found.add(slug if slug not in seen else f"{slug}-{seen[slug]}")
        seen[slug] = seen.get(slug, 0) + 1
    return found


def link_problems(path: Path, root: Path = ROOT) -> list[str]:
    text = ANY_BLOCK.sub("", path.read_text(encoding="utf-8"))
    text = re.sub(r"`[^`\n]*`", "", text)  # inline code shows syntax, links nothing
    problems = []
    for target in LINK.findall(text):
        if re.match(r"[a-z][\w+.-]*:", target):
            continue  # https:, mailto:
        file_part, _, anchor = target.partition("#")
        linked = (path.parent / file_part).resolve() if file_part else path
        where = f"{path.relative_to(root)}: link {target}"
        if not linked.exists():
            problems.append(f"{where}: no such file")
        elif anchor and linked.suffix == ".md" and anchor not in anchors(linked.read_text(encoding="utf-8")):
            problems.append(f"{where}: {linked.name} has no heading #{anchor}")
    return problems


# ---- the repository's docs ------------------------------------------------------------------------


@pytest.mark.parametrize("path", doc_files(), ids=lambda path: path.name)
def test_every_command_shown_exists(path):
    assert command_problems(path) == []


@pytest.mark.parametrize("path", doc_files(), ids=lambda path: path.name)
def test_every_relative_link_resolves(path):
    assert link_problems(path) == []


def test_the_readme_links_every_docs_page():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert [page.name for page in doc_files()[1:] if f"(docs/{page.name}" not in readme] == []


# ---- the checker itself ---------------------------------------------------------------------------


def test_the_commands_are_read_from_shell_blocks_only():
    text = ("```bash\nPIPELINE_NPROC=4 dvc exp run -S x=1 && dvc queue start -j 2   # two\n"
            "python -m stages bench [--scale tiny|paper] --output <file> \\\n  --section startup\n"
            "dvc exp show --csv > runs.csv\n```\n\n```\ndvc not-a-command\n```\n")
    assert shell_commands(text) == [["dvc", "exp", "run", "-S", "x=1"], ["dvc", "queue", "start", "-j", "2"],
                                    ["python", "-m", "stages", "bench", "--scale", "tiny", "paper", "--output",
                                     "PLACEHOLDER", "--section", "startup"], ["dvc", "exp", "show", "--csv"]]


@pytest.mark.parametrize("command", [
    "dvc frobnicate", "dvc exp frobnicate --queue", "dvc exp run --no-such-flag", "dvc metrics show -Z",
    "python -m stages no-such-stage --help", "python -m stages report --no-such-flag",
    "python -m tools.no_such_tool", "python -m tools.benchmark.readme --no-such-flag",
    "bash scripts/no_such_script.sh", "python scripts/seed_noise.py --no-such-flag",
    "while dvc queue frobnicate", "PIPELINE_NPROC=2 dvc exp run --no-such-flag",
])
def test_a_made_up_command_or_flag_is_caught(command):
    assert check_command(shlex.split(command)) != []


@pytest.mark.parametrize("command", [
    "dvc repro", "dvc repro report", "dvc exp run --queue -S train.cael=4", "dvc metrics diff --all x.json",
    "python -m stages report --queue jtcse-cael --run", "python -m stages --help",
    "python -m tools.benchmark.readme --check", "bash scripts/gpu_check.sh --device cpu --output x.json",
    "python -m tools.gpu_check --cost-table x.json",
    "git fetch", ".venv/bin/python -m pytest -n auto",
])
def test_a_real_command_passes(command):
    assert check_command(shlex.split(command)) == []


def test_a_broken_link_or_anchor_is_caught(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "page.md").write_text("# A page\n\n## Equation ↔ code (`x.py`)\n")
    (tmp_path / "README.md").write_text(
        "[ok](docs/page.md) [ok](docs/page.md#equation--code-xpy) [ok](#top) [web](https://example.org)\n"
        "`[not a link](nowhere.md)`\n\n# Top\n\n[gone](docs/missing.md) [bad](docs/page.md#no-such-heading)\n")
    problems = link_problems(tmp_path / "README.md", tmp_path)
    assert len(problems) == 2 and "docs/missing.md: no such file" in problems[0] and "#no-such-heading" in problems[1]


def test_the_stage_graph_is_the_one_dvc_draws_from_dvc_yaml():
    """The stage graph is drawn once (docs/architecture.md), by `dvc dag --md`: a stage added to or
    removed from dvc.yaml shows here until the block is redrawn."""
    text = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    start, end = "<!-- stage graph: written by `dvc dag --md`", "<!-- /stage graph -->"
    block = text[text.index(start):text.index(end)].split("\n", 1)[1].strip()
    drawn = subprocess.run([sys.executable, "-m", "dvc", "dag", "--md"], cwd=ROOT, capture_output=True, text=True,
                           check=True).stdout.strip()
    assert block == drawn, "redraw it: `dvc dag --md` between the stage-graph markers of docs/architecture.md"
    assert "download ─┬─>" not in (ROOT / "README.md").read_text(encoding="utf-8")  # no second drawing


# ---- every `-S` override shown composes, as `dvc exp run` composes it -----------------------------------------------

OVERRIDE = re.compile(r"(?<![\w-])-S\s+('[^']*'|\"[^\"]*\"|[^\s`)|;&]+)")
PLACEHOLDER = re.compile(r"<[^<>]*>|\.\.\.|…")
REFUSED_ON_PURPOSE = {"no_such_key=1"}  # shown as what Hydra refuses


def shown_overrides(root: Path = ROOT) -> list[tuple[str, list[str]]]:
    """(where, the `-S` overrides of one command) for every command line of README and docs, shell blocks and inline
    code alike; a sweep `key=a,b` becomes one command per value, and placeholders are left out."""
    found = []
    for path in doc_files(root):
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
            for command in re.split(r"`|&&|;", line):
                overrides = [value.strip("'\"") for value in OVERRIDE.findall(command)]
                overrides = [value for value in overrides if not PLACEHOLDER.search(value) and value not in REFUSED_ON_PURPOSE]
                found += [(f"{path.name}:{number}", combination) for combination in _sweeps(overrides)]
    return found


def _sweeps(overrides: list[str]) -> list[list[str]]:
    """Hydra's sweep syntax (`key=a,b`, outside brackets) as one list of plain overrides per value."""
    combinations = [[]]
    for override in overrides:
        key, _, value = override.partition("=")
        values = value.split(",") if "," in value and not value.startswith("[") else [value]
        combinations = [done + [f"{key}={one}"] for done in combinations for one in values]
    return combinations if overrides else []


def test_every_override_shown_in_the_docs_composes_and_validates():
    """`dvc exp run -S key=value` composes conf/ with Hydra and the stage validates the result: every override README
    and docs show must do both (a key missing from conf/config.yaml is refused by Hydra, as train.deterministic was)."""
    from hydra import compose, initialize_config_dir
    from hydra.errors import HydraException
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    from pipeline.params_file import parse_params

    shown = shown_overrides()
    assert len(shown) > 50 and any("train.deterministic=true" in overrides for _, overrides in shown)
    problems = []
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base=None):
        for where, overrides in shown:
            try:
                parse_params(OmegaConf.to_container(compose(config_name="config", overrides=overrides), resolve=True))
            except (HydraException, OmegaConfBaseException, PipelineError) as error:
                problems.append(f"{where}: -S {' -S '.join(overrides)}: {str(error).splitlines()[0]}")
        with pytest.raises(HydraException):
            compose(config_name="config", overrides=sorted(REFUSED_ON_PURPOSE))
    assert problems == []


# ---- every repository path the docs name exists ------------------------------------------------------------------

GENERATED = ("data/", ".tmp/")  # made by the pipeline, absent from a fresh clone
NAMED_PATH = re.compile(r"`((?:pipeline|stages|tools|scripts|tests|conf|bench|reports|docs|data|\.ci)/[\w./-]*)`")
LAYOUT_LINE = re.compile(r"^( *)(\S[^ ]*(?:, \S+)*)(?:  |$)")


def named_paths(text: str) -> list[str]:
    """Repository paths in inline code (`pipeline/losses.py`), and every file and folder of a layout tree (a fenced
    block whose lines are `name  what it holds`, nested by two spaces under `pipeline/`, `tools/`, …)."""
    paths = [path.rstrip(".,:;") for path in NAMED_PATH.findall(text)]
    for language, block in re.findall(r"^```(\w*)\n(.*?)^```", text, re.M | re.S):  # fences paired in order
        if language:
            continue
        lines = block.splitlines()
        if not lines or not re.match(r"(stages|pipeline|tools|scripts)/(\s|$)", lines[0]):
            continue
        parents: list[str] = []
        for line in lines:
            match = LAYOUT_LINE.match(line)
            if not match:
                continue
            depth = len(match.group(1)) // 2
            parents = parents[:depth]
            names = [name.strip() for name in match.group(2).split(",")]
            paths += ["".join(parents) + name for name in names]
            if names[0].endswith("/"):
                parents.append(names[0])
    return [path for path in paths if not path.startswith(GENERATED)]


@pytest.mark.parametrize("path", doc_files(), ids=lambda path: path.name)
def test_every_repository_path_named_exists(path):
    assert [named for named in named_paths(path.read_text(encoding="utf-8")) if not (ROOT / named).exists()] == []


def test_a_layout_tree_names_its_files_under_their_folders():
    tree = "```\npipeline/\n  models.py             the registry\n  io.py, paths.py   files\n  data/   readers\n    pinned.py  pins\n```\n"
    assert named_paths(tree) == ["pipeline/", "pipeline/models.py", "pipeline/io.py", "pipeline/paths.py", "pipeline/data/",
                                 "pipeline/data/pinned.py"]
