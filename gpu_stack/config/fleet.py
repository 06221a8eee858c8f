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

import os
import re
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, Field, ValidationError

from .errors import MISSING, Problem, render_problems
from .grammars import url_without_credentials
from .safe_input import Flag, PlainStr, WholeNumber, escape, redact_url_credentials, shorten
from .stack_files import STACK_NAME_RE, StackFileError, list_stacks, load_yaml_file
from .types import ConfigModel

FLEET_FILE = "fleet.yaml"
DEFAULT_ORDER = ("dev", "staging", "prod")
"""Without a fleet file: dev first (the canary), then staging, then every other committed stack
(one wave, alphabetical), prod last; each wave one stack at a time."""


MAX_FLEET_BYTES = 256 * 1024
"""A fleet file larger than this is refused before it is parsed (a fleet of 200 stacks, each with
its Prometheus and alert labels, is about 40 KiB; a bound of 1 MiB let a file of one flow list
take the YAML reader 18 s)."""
MAX_STACKS = 1000
"""The most stacks a wave, or `exclude`, lists (and the most waves): a fleet of 200 stacks is large."""
LISTED = 8
"""How many names a message lists before it counts the rest."""


def listed(names: list[str]) -> str:
    """`a, b, c` for a message: at most LISTED names, then how many more."""
    more = f", and {len(names) - LISTED} more" if len(names) > LISTED else ""
    return ", ".join(names[:LISTED]) + more if names else "none"


class FleetError(Exception):
    """A bad fleet file: every problem, one line each naming its key."""

    def __init__(self, source: str, problems: list[Problem]):
        self.problems = problems
        lines = render_problems(problems)
        header = f"invalid fleet file {shorten(source, 160)}" + ("" if len(lines) == 1 else f" ({len(lines)} problems)")
        super().__init__(header + ":\n  " + "\n  ".join(lines))


def is_stack_name(value: str) -> bool:
    """A plain stack name, as `Pulumi.<stack>.yaml` names its file (stack_files.check_stack_name)."""
    return bool(STACK_NAME_RE.fullmatch(value)) and value not in (".", "..")


def _stack_name(value: str) -> str:
    if not is_stack_name(value):
        raise ValueError("must be a plain stack name: letters, digits, '-', '_' and '.' (Pulumi.<stack>.yaml)")
    return value


def _wave_name(value: str) -> str:
    if not is_stack_name(value):
        raise ValueError("must be a name as a stack's is: letters, digits, '-', '_' and '.' "
                         "(it is typed after --wave and in the resume command)")
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
WaveName = Annotated[PlainStr, AfterValidator(_wave_name)]
PrometheusUrl = Annotated[PlainStr, AfterValidator(_prometheus_url)]
LabelName = Annotated[PlainStr, AfterValidator(_label_name)]


class Gate(ConfigModel):
    """What a stack of the wave must pass before the next wave starts."""

    validation: Flag = True
    """The stack's validation Jobs ran and passed: its `up` succeeded and its `validationJobs`
    output is not empty (a stack with `validation.enabled: false` does not pass this gate)."""
    soak_seconds: WholeNumber = Field(default=0, ge=0, le=86400)
    """Seconds to wait after the stack's `up`; when the fleet names the stack's Prometheus
    (`prometheus`), none of the stack's GPU alerts (its `alertRules` output) may fire meanwhile,
    and none may still be pending when the soak ends (an alert whose `for:` outlasts the soak)."""
    poll_seconds: WholeNumber = Field(default=15, ge=1, le=600)
    """How often the soak asks Prometheus for the stack's firing and pending alerts."""


class Wave(ConfigModel):
    """A group of stacks updated together; the first wave is the canary."""

    name: WaveName = Field(min_length=1, max_length=63)
    """How the progress lines, the roll-up and `--wave` name the wave: letters, digits, '-', '_'
    and '.', as a stack name."""
    stacks: list[StackName] = Field(min_length=1, max_length=MAX_STACKS)
    """The stacks of the wave (each `Pulumi.<stack>.yaml` beside `Pulumi.yaml`), in start order."""
    parallel: WholeNumber = Field(default=1, ge=1, le=64)
    """How many stacks of the wave are updated at once."""
    gate: Gate = Gate()
    """What each stack of the wave must pass before the next wave starts."""


class Fleet(ConfigModel):
    """The fleet: its waves, in order, and what a failure stops."""

    waves: list[Wave] = Field(min_length=1, max_length=MAX_STACKS)
    """The rollout order: wave by wave, a wave starts only when every stack of the one before passed its gate."""
    on_failure: Literal["stop", "finish-wave"] = "stop"
    """When a stack's `up` or gate fails: `stop` starts no other stack (the ones running finish);
    `finish-wave` still runs the rest of its wave. Either way no later wave starts."""
    on_unreachable: Literal["stop", "skip"] = "stop"
    """When a stack's cluster cannot be reached (its preview fails to connect): `stop` stops the
    rollout there like a failure, `skip` leaves that stack untouched and goes on with the others."""
    preview_parallel: WholeNumber = Field(default=4, ge=1, le=64)
    """How many stacks `fleet preview` (and the preview before `fleet up`) runs at once."""
    prometheus: dict[StackName, PrometheusUrl] = Field(default_factory=dict)
    """Stack -> its Prometheus URL (http or https, no credentials), read by the soak gate. Stacks
    that share one Prometheus must each have `alertLabels` that tell their alerts apart."""
    alert_labels: dict[StackName, dict[LabelName, PlainStr]] = Field(default_factory=dict)
    """Stack -> label matchers (`{cluster: prod-eu}`: label = value) every alert of the stack
    carries in its Prometheus (an external label, or one its alert rules add), so the soak gate
    reads only the stack's own alerts where several stacks share one Prometheus."""
    exclude: list[StackName] = Field(default_factory=list, max_length=MAX_STACKS)
    """Committed stacks deliberately outside the fleet (a personal or scratch stack): each has its
    `Pulumi.<stack>.yaml` and is in no wave."""

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
            out += ("." if out else "") + shorten(redact_url_credentials(str(part)), 80)
    return out or "(top)"


SHOWN_VALUE = 100
"""The longest value a problem in the fleet file shows."""


_CONTAINER_ERRORS = frozenset({"model_type", "model_attributes_type", "dict_type", "list_type"})
"""pydantic's errors for a value where a mapping or a list belongs: what is there is not shown."""


def _shown(loc: tuple[Any, ...], value: Any, kind: str = "") -> Any:
    """The value a problem may show: a number, a flag or a short name. Never a URL (`prometheus`:
    its path or host may be a secret), never what an unknown key holds, never a mapping or list
    (the top of a file that is no fleet file, a linked file's first lines), never what stands
    where a mapping or a list belongs."""
    if loc[:1] == ("prometheus",) or kind in _CONTAINER_ERRORS:
        return MISSING
    if isinstance(value, bool | int | float) or value is None:
        return value
    if isinstance(value, str) and len(value) <= SHOWN_VALUE and "://" not in value:
        return value
    return MISSING


def _problems(exc: ValidationError) -> list[Problem]:
    found = []
    for err in exc.errors():
        msg = str(err.get("msg", "invalid"))
        msg = msg.removeprefix("Value error, ")
        loc = tuple(err.get("loc", ()))
        value = _shown(loc, err.get("input"), str(err.get("type", "")))
        if err.get("type") == "extra_forbidden":
            msg = "unknown key (its value is not shown)"
            value = MISSING
        elif err.get("type") == "missing":
            msg = "is required"
            value = MISSING
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
                problems.append(Problem(key=key, value=stack, message=f"has no stack file Pulumi.{stack}.yaml (stacks: {listed(committed)})"))
            seen.setdefault(stack, f"waves[{i}] ({wave.name})")
    names = [w.name for w in fleet.waves]
    for i, name in enumerate(names):
        if names.index(name) != i:
            problems.append(Problem(key=f"waves[{i}].name", value=name, message="names another wave too: wave names are unique"))
    for i, stack in enumerate(fleet.exclude):
        if stack not in committed:
            problems.append(Problem(key=f"exclude[{i}]", value=stack, message=(
                f"has no stack file Pulumi.{stack}.yaml: exclude names committed stacks (stacks: {listed(committed)})")))
        elif stack in seen:
            problems.append(Problem(key=f"exclude[{i}]", value=stack, message=f"is in {seen[stack]} too: a stack is in a wave or excluded"))
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
    for stacks in by_url.values():
        if len(stacks) < 2:
            continue
        for stack in stacks:
            others = [s for s in stacks if s != stack]
            labels = fleet.alert_labels.get(stack)
            same = [s for s in others if labels and fleet.alert_labels.get(s) == labels]
            if not labels or same:
                problems.append(Problem(
                    key=f"alertLabels.{stack}", value=labels or MISSING,
                    message=(f"{stack} shares its Prometheus (the same URL) with {listed(same or others)}: give each stack "
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
        # never the value: the start of a file linked or pasted here
        raise FleetError(source, [Problem(key="(top)", value=MISSING, message=f"must be a mapping with `waves:` (it is {_kind(doc)})")])
    too_long = _too_long(doc)
    if too_long:
        raise FleetError(source, too_long)
    try:
        fleet = Fleet.model_validate(doc)
    except ValidationError as exc:
        raise FleetError(source, _problems(exc)) from None
    problems = cross_problems(fleet, committed)
    if problems:
        raise FleetError(source, problems)
    return fleet


def _too_long(doc: dict[Any, Any]) -> list[Problem]:
    """A list over MAX_STACKS items (`waves`, a wave's `stacks`, `exclude`), said before a single
    item is checked: aliases can make a list of a few bytes hundreds of thousands of items long."""
    waves = doc.get("waves")
    lists = {"waves": waves, "exclude": doc.get("exclude")}
    for i, wave in enumerate(waves if isinstance(waves, list) else []):
        lists[f"waves[{i}].stacks"] = wave.get("stacks") if isinstance(wave, dict) else None
    return [Problem(key=key, value=MISSING, message=f"lists {len(items)} items: at most {MAX_STACKS}")
            for key, items in lists.items() if isinstance(items, list) and len(items) > MAX_STACKS][:1]


def _kind(doc: Any) -> str:
    return {type(None): "empty", str: "text", list: "a list"}.get(type(doc), f"a {type(doc).__name__}")


def committed_stacks(project_dir: Path | str) -> tuple[list[str], list[str]]:
    """The stacks of the project's `Pulumi.<stack>.yaml` files, and the files named so whose
    `<stack>` is no stack name (`Pulumi.my stack.yaml`): no stack of the fleet, named in a note."""
    names = list_stacks(project_dir)
    return [n for n in names if is_stack_name(n)], [f"Pulumi.{n}.yaml" for n in names if not is_stack_name(n)]


def not_stack_note(odd: list[str]) -> str | None:
    """The one line that names the files `committed_stacks` left out, or None."""
    if not odd:
        return None
    shown = shorten(listed([shorten(escape(name), 40) for name in odd]), 200)
    return (f"note: not part of the fleet: {shown}: a stack's name is letters, digits, '-', '_' and '.' "
            "(rename the file Pulumi.<stack>.yaml to make it one)")


def load_fleet(project_dir: Path | str, path: Path | str | None = None) -> tuple[Fleet, str]:
    """The project's fleet and where it came from (the file, or `default order`). The file is read
    as a stack file is (stack_files.load_yaml_file): a regular file of at most MAX_FLEET_BYTES, not
    a link out of its folder, YAML 1.2 with keys once and aliases bounded before they expand."""
    project_dir = Path(project_dir)
    committed, _ = committed_stacks(project_dir)
    file = Path(path) if path is not None else project_dir / FLEET_FILE
    shown = shorten(escape(str(file)), 160) if path is not None else FLEET_FILE
    if path is None and not os.path.lexists(file):
        return default_fleet(committed), "default order (no fleet.yaml): " + ", ".join(
            s for s in DEFAULT_ORDER if s in committed
        )
    # a link may point anywhere inside the project, or, for a file named outside it, inside its folder
    inside = Path(os.path.abspath(file)).is_relative_to(os.path.abspath(project_dir))
    try:
        doc = load_yaml_file(file, "a fleet file", MAX_FLEET_BYTES, within=project_dir if inside else file.parent)
    except StackFileError as exc:
        why = str(exc).removeprefix(escape(str(file)) + ": ")
        raise FleetError(shown, [Problem(key="(file)", value=MISSING, message=f"cannot be read: {why}")]) from None
    return parse_fleet(doc, committed, shown), shown
