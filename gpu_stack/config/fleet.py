"""The fleet file: which stacks a change goes to, in which waves, and what stops it.

`fleet.yaml` beside `Pulumi.yaml` (not `Pulumi.fleet.yaml`: the Pulumi CLI and this project read
every `Pulumi.<name>.yaml` as the stack file of a stack called `<name>`). Without the file, the
committed stacks roll out in DEFAULT_ORDER (`default_fleet`). A bad file fails in one line per
problem naming the key, the value and what is allowed (`FleetError`), like the stack config.

    waves:
      - name: canary
        stacks: [dev]
        gate: {soakSeconds: 300}
      - name: prod
        stacks: [prod-eu, prod-us]
        parallel: 2
    onFailure: stop
    prometheus: {prod-eu: "http://prometheus.example:9090", prod-us: "http://prometheus.example:9090"}
    alertLabels: {prod-eu: {cluster: prod-eu}, prod-us: {cluster: prod-us}}
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import AfterValidator, Field, ValidationError

from .errors import MISSING, Problem, render_problems
from .grammars import url_without_credentials
from .safe_input import PlainStr, escape
from .stack_files import STACK_NAME_RE, list_stacks
from .types import ConfigModel

FLEET_FILE = "fleet.yaml"
DEFAULT_ORDER = ("dev", "staging", "prod")
"""Without a fleet file: dev first (the canary), then staging, then every other committed stack
(one wave, alphabetical), prod last; each wave one stack at a time."""


class FleetError(Exception):
    """A bad fleet file: every problem, one line each naming its key."""

    def __init__(self, source: str, problems: list[Problem]):
        self.problems = problems
        lines = render_problems(problems)
        header = f"invalid fleet file {source}" + ("" if len(lines) == 1 else f" ({len(lines)} problems)")
        super().__init__(header + ":\n  " + "\n  ".join(lines))


def _stack_name(value: str) -> str:
    if not STACK_NAME_RE.fullmatch(value) or value in (".", ".."):
        raise ValueError("must be a plain stack name: letters, digits, '-', '_' and '.' (Pulumi.<stack>.yaml)")
    return value


def _prometheus_url(value: str) -> str:
    return url_without_credentials(value, ("http", "https"), "Prometheus URL", "use a URL without credentials")


LABEL_NAME_RE = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")


def _label_name(value: str) -> str:
    if not LABEL_NAME_RE.fullmatch(value) or value.startswith("__"):
        raise ValueError("must be a Prometheus label name: a letter or '_', then letters, digits and '_' "
                         "(not starting with '__', which Prometheus reserves)")
    if value in ("alertname", "alertstate"):
        raise ValueError("is set by Prometheus on every ALERTS series: name a label that tells the stacks apart (e.g. cluster)")
    return value


StackName = Annotated[PlainStr, AfterValidator(_stack_name)]
PrometheusUrl = Annotated[PlainStr, AfterValidator(_prometheus_url)]
LabelName = Annotated[PlainStr, AfterValidator(_label_name)]


class Gate(ConfigModel):
    """What a stack of the wave must pass before the next wave starts."""

    validation: bool = True
    """The stack's validation Jobs ran and passed: its `up` succeeded and its `validationJobs`
    output is not empty (a stack with `validation.enabled: false` does not pass this gate)."""
    soak_seconds: int = Field(default=0, ge=0, le=86400)
    """Seconds to wait after the stack's `up`; when the fleet names the stack's Prometheus
    (`prometheus`), none of the stack's GPU alerts (its `alertRules` output) may fire meanwhile,
    and none may still be pending when the soak ends (an alert whose `for:` outlasts the soak)."""
    poll_seconds: int = Field(default=15, ge=1, le=600)
    """How often the soak asks Prometheus for the stack's firing and pending alerts."""


class Wave(ConfigModel):
    """A group of stacks updated together; the first wave is the canary."""

    name: PlainStr = Field(min_length=1, max_length=63)
    """How the progress lines and the roll-up name the wave."""
    stacks: list[StackName] = Field(min_length=1)
    """The stacks of the wave (each `Pulumi.<stack>.yaml` beside `Pulumi.yaml`), in start order."""
    parallel: int = Field(default=1, ge=1, le=64)
    """How many stacks of the wave are updated at once."""
    gate: Gate = Gate()
    """What each stack of the wave must pass before the next wave starts."""


class Fleet(ConfigModel):
    """The fleet: its waves, in order, and what a failure stops."""

    waves: list[Wave] = Field(min_length=1)
    """The rollout order: wave by wave, a wave starts only when every stack of the one before passed its gate."""
    on_failure: Literal["stop", "finish-wave"] = "stop"
    """When a stack's `up` or gate fails: `stop` starts no other stack (the ones running finish);
    `finish-wave` still runs the rest of its wave. Either way no later wave starts."""
    on_unreachable: Literal["stop", "skip"] = "stop"
    """When a stack's cluster cannot be reached (its preview fails to connect): `stop` stops the
    rollout there like a failure, `skip` leaves that stack untouched and goes on with the others."""
    preview_parallel: int = Field(default=4, ge=1, le=64)
    """How many stacks `fleet preview` (and the preview before `fleet up`) runs at once."""
    prometheus: dict[StackName, PrometheusUrl] = Field(default_factory=dict)
    """Stack -> its Prometheus URL (http or https, no credentials), read by the soak gate. Stacks
    that share one Prometheus must each have `alertLabels` that tell their alerts apart."""
    alert_labels: dict[StackName, dict[LabelName, PlainStr]] = Field(default_factory=dict)
    """Stack -> label matchers (`{cluster: prod-eu}`: label = value) every alert of the stack
    carries in its Prometheus (an external label, or one its alert rules add), so the soak gate
    reads only the stack's own alerts where several stacks share one Prometheus."""
    exclude: list[StackName] = Field(default_factory=list)
    """Committed stacks deliberately outside the fleet (a personal or scratch stack)."""

    @property
    def stacks(self) -> list[str]:
        """Every stack, in rollout order."""
        return [s for wave in self.waves for s in wave.stacks]

    def wave_of(self, stack: str) -> Wave:
        return next(w for w in self.waves if stack in w.stacks)


def _key(loc: tuple[Any, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out or "(top)"


def _problems(exc: ValidationError) -> list[Problem]:
    found = []
    for err in exc.errors():
        msg = str(err.get("msg", "invalid"))
        msg = msg.removeprefix("Value error, ")
        loc = tuple(err.get("loc", ()))
        value = err.get("input")
        if err.get("type") == "extra_forbidden":
            msg = "unknown key"
        elif err.get("type") == "missing":
            msg = "is required"
            value = None
        found.append(Problem(key=_key(loc), value=value, message=msg))
    return found


def cross_problems(fleet: Fleet, committed: list[str]) -> list[Problem]:
    """What one model cannot see: a stack twice, a stack without its file, a committed stack in no
    wave, a Prometheus for a stack outside the fleet."""
    problems: list[Problem] = []
    seen: dict[str, str] = {}
    for i, wave in enumerate(fleet.waves):
        for j, stack in enumerate(wave.stacks):
            key = f"waves[{i}].stacks[{j}]"
            if stack in seen:
                problems.append(Problem(key=key, value=stack, message=f"is already in {seen[stack]}: a stack belongs to one wave"))
            elif stack not in committed:
                problems.append(Problem(key=key, value=stack, message=f"has no stack file Pulumi.{stack}.yaml (stacks: {', '.join(committed) or 'none'})"))
            seen.setdefault(stack, f"waves[{i}] ({wave.name})")
    names = [w.name for w in fleet.waves]
    for i, name in enumerate(names):
        if names.index(name) != i:
            problems.append(Problem(key=f"waves[{i}].name", value=name, message="names another wave too: wave names are unique"))
    for stack in committed:
        if stack not in seen and stack not in fleet.exclude:
            problems.append(Problem(
                key="waves", value=stack,
                message=f"stack {stack} has a stack file but is in no wave: add it to a wave or to exclude",
            ))
    for stack in fleet.prometheus:
        if stack not in seen:
            problems.append(Problem(key=f"prometheus.{stack}", value=stack, message="is not a stack of any wave"))
    for stack, labels in fleet.alert_labels.items():
        if stack not in seen:
            problems.append(Problem(key=f"alertLabels.{stack}", value=stack, message="is not a stack of any wave"))
        elif stack not in fleet.prometheus:
            problems.append(Problem(key=f"alertLabels.{stack}", value=labels,
                                    message=f"has no Prometheus to match in: set prometheus.{stack} too"))
    problems += _shared_prometheus(fleet)
    return problems


def _shared_prometheus(fleet: Fleet) -> list[Problem]:
    """Stacks that share one Prometheus (the same URL) and whose alerts the soak gate could not tell
    apart: one without `alertLabels`, or two with the same ones."""
    problems: list[Problem] = []
    by_url: dict[str, list[str]] = {}
    for stack, url in fleet.prometheus.items():
        by_url.setdefault(url.rstrip("/"), []).append(stack)
    for url, stacks in by_url.items():
        if len(stacks) < 2:
            continue
        for stack in stacks:
            others = [s for s in stacks if s != stack]
            labels = fleet.alert_labels.get(stack)
            same = [s for s in others if labels and fleet.alert_labels.get(s) == labels]
            if not labels or same:
                problems.append(Problem(
                    key=f"alertLabels.{stack}", value=labels or MISSING,
                    message=(f"{stack} shares the Prometheus at {url} with {', '.join(same or others)}: give each stack "
                             f"alert labels of its own (e.g. alertLabels: {{{stack}: {{cluster: {stack}}}}}) or the soak "
                             "gate cannot tell their alerts apart"),
                ))
    return problems


def default_fleet(committed: list[str]) -> Fleet:
    """The fleet without a fleet file: DEFAULT_ORDER's stacks that exist, every other committed
    stack in one wave before prod."""
    others = sorted(s for s in committed if s not in DEFAULT_ORDER)
    waves: list[dict[str, Any]] = []
    for stack in DEFAULT_ORDER[:2]:
        if stack in committed:
            waves.append({"name": "canary" if not waves else stack, "stacks": [stack]})
    if others:
        waves.append({"name": "canary" if not waves else "others", "stacks": others})
    if "prod" in committed:
        waves.append({"name": "canary" if not waves else "prod", "stacks": ["prod"]})
    if not waves:
        raise FleetError("(default)", [Problem(key="waves", value=None, message="no Pulumi.<stack>.yaml beside Pulumi.yaml: no stack to roll out")])
    return Fleet.model_validate({"waves": waves})


def parse_fleet(doc: Any, committed: list[str], source: str = FLEET_FILE) -> Fleet:
    """A fleet from the file's YAML document, checked against the committed stacks."""
    if not isinstance(doc, dict):
        raise FleetError(source, [Problem(key="(top)", value=doc, message="must be a mapping with `waves:`")])
    try:
        fleet = Fleet.model_validate(doc)
    except ValidationError as exc:
        raise FleetError(source, _problems(exc)) from None
    problems = cross_problems(fleet, committed)
    if problems:
        raise FleetError(source, problems)
    return fleet


def load_fleet(project_dir: Path | str, path: Path | str | None = None) -> tuple[Fleet, str]:
    """The project's fleet and where it came from (the file, or `default order`)."""
    project_dir = Path(project_dir)
    committed = list_stacks(project_dir)
    file = Path(path) if path is not None else project_dir / FLEET_FILE
    if not file.exists():
        if path is not None:
            raise FleetError(escape(str(file)), [Problem(key="(file)", value=MISSING, message="no such file")])
        return default_fleet(committed), "default order (no fleet.yaml): " + ", ".join(
            s for s in DEFAULT_ORDER if s in committed
        )
    try:
        doc = yaml.safe_load(file.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 1})" if mark is not None else ""
        what = getattr(exc, "problem", None) or getattr(exc, "strerror", None) or type(exc).__name__
        raise FleetError(escape(file.name), [Problem(key="(file)", value=MISSING, message=f"cannot be read: {what}{where}")]) from None
    return parse_fleet(doc, committed, file.name), file.name
