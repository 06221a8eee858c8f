"""A stack file or `Pulumi.yaml` is parsed once per text in a process (a fleet plan reads the same
Pulumi.yaml for every stack): a changed file is read anew, and no reader sees another reader's
changes to its copy."""

from __future__ import annotations

from pathlib import Path

from gpu_stack.config.stack_files import load_yaml_file, read_stack


def _project(folder: Path, replicas: int) -> None:
    (folder / "Pulumi.yaml").write_text(
        "name: gpu-stack\nruntime: python\nconfig:\n  gpu-stack:sharing:\n    default:\n"
        f"      replicas: {replicas}\n"
    )
    (folder / "Pulumi.dev.yaml").write_text("config: {}\n")


def test_a_changed_project_file_is_read_again(tmp_path):
    _project(tmp_path, 2)
    assert read_stack(tmp_path, "dev").namespace()["sharing"] == {"replicas": 2}
    _project(tmp_path, 4)
    assert read_stack(tmp_path, "dev").namespace()["sharing"] == {"replicas": 4}


def test_each_reader_of_a_remembered_document_has_its_own_copy(tmp_path):
    _project(tmp_path, 2)
    first = load_yaml_file(tmp_path / "Pulumi.yaml")
    first["config"]["gpu-stack:sharing"]["default"]["replicas"] = 99
    second = load_yaml_file(tmp_path / "Pulumi.yaml")
    assert second["config"]["gpu-stack:sharing"]["default"]["replicas"] == 2
    assert second is not first and load_yaml_file(tmp_path / "Pulumi.yaml") is not second
