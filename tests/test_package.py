"""gpu-stack as an installed package (pyproject.toml): a wheel built from the working tree, installed
into a fresh virtual environment outside the repository, gives the `gpu-stack` command with every
subcommand, carries the data the program reads (config/, the generated docs) and plans a user's own
stack from that user's project folder, exactly as the clone plans it.

No network: the wheel is built with .venv's setuptools (`--no-build-isolation`), installed with
`--no-index --no-deps`, and the fresh environment finds its dependencies (pulumi, pydantic, ...) in
.venv's site-packages through one .pth line, after its own; pyproject.toml's dependencies are
checked against requirements.txt here instead. The chart is never pulled (GPU_STACK_CHART_PULL=off,
an empty cache); where the reference chart is there (`make reference`) the object view renders it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tomllib
from pathlib import Path

import pytest

from gpu_stack.__main__ import build_parser
from gpu_stack.config import package_data
from sandbox import reference

pytestmark = pytest.mark.slow  # a wheel build and subprocesses: about 30 s (tests/conftest.py keeps it off the quick tier too)

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
MINIMAL_STACK = "config:\n  gpu-stack:kubernetes:\n    context: my-cluster\n"
"""The smallest stack file a user writes (README, Your own stack)."""


def _requirement_lines(path: Path) -> list[str]:
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            out.append(line)
    return out


def test_the_package_depends_on_what_requirements_txt_pins():
    """`pip install <clone>` and `pip install -r requirements.txt` (what `pulumi up`'s virtualenv
    gets) install the same versions; Helm's SDK stays optional in both (the `helm` extra)."""
    project = PYPROJECT["project"]
    wanted = _requirement_lines(ROOT / "requirements.txt")
    assert sorted(project["dependencies"] + project["optional-dependencies"]["helm"]) == sorted(wanted)
    assert project["optional-dependencies"]["helm"] == [r for r in wanted if r.startswith("helm-python-sdk")]
    assert PYPROJECT["project"]["scripts"] == {"gpu-stack": "gpu_stack.__main__:main"}


def test_every_subpackage_and_every_data_file_is_in_the_build_config():
    setuptools = PYPROJECT["tool"]["setuptools"]
    listed = set(setuptools["packages"])
    found = {
        ".".join(p.parent.relative_to(ROOT).parts) for p in (ROOT / "gpu_stack").rglob("__init__.py")
    }
    assert found - listed == set(), "add these packages to [tool.setuptools] packages in pyproject.toml"
    dirs = setuptools["package-dir"]
    assert dirs == {"gpu_stack._data.config": "config", "gpu_stack._data.docs": "docs"}
    assert package_data.DATA_PACKAGE_DIR == "_data"
    # config/'s globs ("*", "*/*") reach two levels: nothing deeper may be left out
    deep = [p for p in (ROOT / "config").rglob("*") if p.is_file() and len(p.relative_to(ROOT / "config").parts) > 2]
    assert deep == [], f"files below config/'s second level are not packaged: {deep}"


def test_in_a_clone_the_data_is_the_repositorys_own():
    assert package_data.CLONE_ROOT == ROOT
    assert package_data.config_path("gpu-models.yaml") == ROOT / "config" / "gpu-models.yaml"
    assert package_data.docs_path("plan.schema.json") == ROOT / "docs" / "plan.schema.json"
    assert package_data.data_name(ROOT / "config" / "node-scripts" / "node-prep.sh") == "config/node-scripts/node-prep.sh"


def test_the_project_is_the_nearest_pulumi_yaml_at_or_above_the_working_directory(tmp_path: Path):
    (tmp_path / "proj" / "a" / "b").mkdir(parents=True)
    (tmp_path / "proj" / "Pulumi.yaml").write_text("name: mine\nruntime: python\n")
    assert package_data.find_project_dir(tmp_path / "proj" / "a" / "b") == (tmp_path / "proj").resolve()
    assert package_data.default_project_dir(tmp_path / "proj") == (tmp_path / "proj").resolve()
    # no project around it: in a clone, the clone's own project
    assert package_data.find_project_dir(tmp_path) is None
    assert package_data.default_project_dir(tmp_path) == ROOT


def _tree_copy(dest: Path) -> Path:
    """The working tree as a clone would hold it (tracked files and new ones git does not ignore),
    so the build writes its build/ and egg-info there, not into the repository."""
    names = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT, capture_output=True, check=True,
    ).stdout.decode().split("\0")
    for name in filter(None, names):
        source = ROOT / name
        if source.is_file() and not source.is_symlink():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, dest / name)
    return dest


def _env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PULUMI_CONFIG", "PYTHON", "GPU_STACK_"))}
    env.update(XDG_CACHE_HOME=str(tmp_path / "cache"), GPU_STACK_CHART_PULL="off", PIP_NO_INDEX="1",
               PIP_DISABLE_PIP_VERSION_CHECK="1")
    return env


def _fresh_venv(venv: Path) -> Path:
    """A virtual environment without pip whose dependencies come from .venv (one .pth line, after
    its own site-packages); returns its python."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    purelib = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                  capture_output=True, text=True, check=True).stdout.strip())
    (purelib / "zz-dependencies-from-dot-venv.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return python


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> tuple[Path, Path]:
    """(the fresh environment's bin folder, its gpu_stack package folder)."""
    tmp = tmp_path_factory.mktemp("package")
    env = _env(tmp)
    source = _tree_copy(tmp / "src")
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index", "-w", str(tmp / "wheels"),
         str(source)], env=env, capture_output=True, text=True, timeout=300,
    )
    assert built.returncode == 0, built.stdout + built.stderr
    (wheel,) = (tmp / "wheels").glob("gpu_stack-*.whl")
    venv = tmp / "venv"
    python = _fresh_venv(venv)
    purelib = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                  capture_output=True, text=True, check=True).stdout.strip())
    done = subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "--no-index", str(wheel)],
        env=env, capture_output=True, text=True, timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return venv / "bin", purelib / "gpu_stack"


def _user_project(folder: Path) -> Path:
    """A user's own Pulumi project: its Pulumi.yaml, a program that imports gpu_stack (the
    project's own __main__.py), and the minimal stack file; no gpu_stack/ or config/ beside it."""
    folder.mkdir(parents=True)
    (folder / "Pulumi.yaml").write_text("name: my-gpus\nruntime:\n  name: python\n  options:\n    virtualenv: venv\n")
    shutil.copy2(ROOT / "__main__.py", folder / "__main__.py")
    (folder / "Pulumi.mine.yaml").write_text(MINIMAL_STACK)
    return folder


WHERE = (
    "import json, gpu_stack.config.package_data as p; "
    "print(json.dumps([p.PACKAGE_DIR.as_posix(), p.CLONE_ROOT and p.CLONE_ROOT.as_posix(), p.CONFIG_DIR.as_posix()]))"
)


def test_the_installed_package_carries_its_data_and_the_gpu_stack_command(installed, tmp_path: Path):
    bin_dir, package = installed
    python = bin_dir / "python"
    where = subprocess.run(
        [str(python), "-c", WHERE],
        cwd=tmp_path, env=_env(tmp_path), capture_output=True, text=True, timeout=120,
    )
    assert where.returncode == 0, where.stderr
    package_dir, clone, config_dir = json.loads(where.stdout)
    assert Path(package_dir) == package.resolve() and clone is None
    assert Path(config_dir) == package.resolve() / "_data" / "config"
    for name in ("gpu-models.yaml", "job-images.yaml", "dcgm-fields.txt", "dcgm-default-metrics.txt",
                 "node-scripts/node-prep.sh", "mig-rollout/mig-rollout.sh", "validation/vector-add.cu",
                 "validation/common.sh"):
        assert (Path(config_dir) / name).read_bytes() == (ROOT / "config" / name).read_bytes(), name
    for name in ("configuration.md", "fleet-file.md", "stack-config.schema.json", "plan.schema.json"):
        assert (package / "_data" / "docs" / name).read_bytes() == (ROOT / "docs" / name).read_bytes(), name

    helped = subprocess.run([str(bin_dir / "gpu-stack"), "--help"], cwd=tmp_path, env=_env(tmp_path),
                            capture_output=True, text=True, timeout=120)
    assert helped.returncode == 0, helped.stderr
    assert helped.stdout.startswith("usage: gpu-stack ")
    sub = next(a for a in build_parser()._actions if a.dest == "command")
    commands = sorted(sub.choices)  # type: ignore[arg-type]
    assert {"plan", "diff", "images", "fleet", "advise"} <= set(commands)
    for command in commands:
        one = subprocess.run([str(bin_dir / "gpu-stack"), command, "--help"], cwd=tmp_path, env=_env(tmp_path),
                             capture_output=True, text=True, timeout=120)
        assert one.returncode == 0 and one.stdout.startswith(f"usage: gpu-stack {command}"), (command, one.stderr)


def test_the_installed_command_plans_a_users_stack_from_the_project_folder(installed, tmp_path: Path):
    bin_dir, _ = installed
    project = _user_project(tmp_path / "my-gpus")
    env = _env(tmp_path)
    gpu_stack = str(bin_dir / "gpu-stack")

    text = subprocess.run([gpu_stack, "plan", "--stack", "mine"], cwd=project, env=env,
                          capture_output=True, text=True, timeout=300)
    assert text.returncode == 0, text.stderr
    assert text.stdout.startswith("Plan of stack 'mine' (project my-gpus): ") and "kubernetes:helm.sh/v3:Release x1" in text.stdout
    assert "pulling is off" in text.stdout  # the chart's objects: never a pull

    (project / "deeper").mkdir()
    installed_json = subprocess.run([gpu_stack, "plan", "-s", "mine", "--format", "json"], cwd=project / "deeper",
                                    env=env, capture_output=True, text=True, timeout=300)
    assert installed_json.returncode == 0, installed_json.stderr
    plan = json.loads(installed_json.stdout)
    assert (plan["project"], plan["stack"]) == ("my-gpus", "mine")
    types = sorted(r["type"] for r in plan["resources"])
    assert 5 <= len(types) <= 20 and "kubernetes:helm.sh/v3:Release" in types
    provider = next(r for r in plan["resources"] if r["type"] == "pulumi:providers:kubernetes")
    assert provider["inputs"]["context"] == "my-cluster"

    # the clone's code plans the same project to the same plan
    clone_env = {**env, "PYTHONPATH": str(ROOT)}
    from_clone = subprocess.run([sys.executable, "-m", "gpu_stack", "--project-dir", str(project), "plan", "-s", "mine",
                                 "--format", "json"], cwd=ROOT, env=clone_env, capture_output=True, text=True, timeout=300)
    assert from_clone.returncode == 0, from_clone.stderr
    assert json.loads(from_clone.stdout) == plan

    # outside any project: one line saying where to run it
    (tmp_path / "elsewhere").mkdir()
    lost = subprocess.run([gpu_stack, "plan", "-s", "mine"], cwd=tmp_path / "elsewhere", env=env,
                          capture_output=True, text=True, timeout=300)
    assert lost.returncode == 2 and lost.stdout == ""
    assert lost.stderr.startswith("error: no Pulumi.yaml in ") and "pass --project-dir DIR" in lost.stderr
    assert "Traceback" not in lost.stderr


def test_the_installed_command_renders_the_chart_of_a_local_copy(installed, tmp_path: Path):
    """The object view runs Helm in a child process of the installed package (no clone on its path)."""
    bin_dir, _ = installed
    why = reference.unavailable(reference.CHART_DIR)
    if why is not None:
        if reference.in_ci():
            pytest.fail(f"CI=true and {why}", pytrace=False)
        pytest.skip(why)
    project = _user_project(tmp_path / "my-gpus")
    out = subprocess.run([str(bin_dir / "gpu-stack"), "plan", "-s", "mine", "--chart-dir", str(reference.path(reference.CHART_DIR) / "chart")],
                         cwd=project, env=_env(tmp_path), capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert "Objects of release gpu-operator-release (rendered with Helm): " in out.stdout
    assert "+ ClusterPolicy cluster-policy" in out.stdout


def test_pip_installs_from_a_git_url(tmp_path: Path):
    """`pip install git+file://<a clone>`: pip clones the commit and builds it (the backend from the
    environment: --no-build-isolation, offline); the command and the data are there."""
    clone = _tree_copy(tmp_path / "clone")
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@example.invalid", "-c", "commit.gpgsign=false"]
    subprocess.run(["git", "init", "-q", str(clone)], check=True, timeout=60)
    subprocess.run([*git, "-C", str(clone), "add", "-A"], check=True, timeout=120)
    subprocess.run([*git, "-C", str(clone), "commit", "-q", "-m", "clone"], check=True, timeout=120)
    python = _fresh_venv(tmp_path / "venv")
    env = _env(tmp_path)
    done = subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "--no-index", "--no-build-isolation",
         f"git+{clone.as_uri()}"], env=env, capture_output=True, text=True, timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    where = subprocess.run([str(python), "-c", WHERE], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    package_dir, clone_root, config_dir = json.loads(where.stdout)
    assert clone_root is None and Path(package_dir).is_relative_to(tmp_path / "venv")
    assert (Path(config_dir) / "gpu-models.yaml").read_bytes() == (ROOT / "config" / "gpu-models.yaml").read_bytes()
    helped = subprocess.run([str(tmp_path / "venv" / "bin" / "gpu-stack"), "plan", "--help"], cwd=tmp_path, env=env,
                            capture_output=True, text=True, timeout=120)
    assert helped.returncode == 0 and helped.stdout.startswith("usage: gpu-stack plan"), helped.stderr
