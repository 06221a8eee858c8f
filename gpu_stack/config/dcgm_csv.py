"""dcgm-exporter's metrics CSV, read the way the exporter reads it, and its field lists.

The CSV is checked the way dcgm-exporter 4.4.2-4.7.0 reads it (Go's encoding/csv, then its
counters/counter_config.go), so a bad list fails at plan time naming the line instead of
crash-looping the exporter pod. A data module: it knows nothing of the stack config.
"""

from __future__ import annotations

from functools import lru_cache

from .package_data import config_path

METRIC_TYPES = ("gauge", "counter", "histogram", "summary", "label")

FIELDS_PATH = config_path("dcgm-fields.txt")


@lru_cache(maxsize=1)
def known_fields() -> frozenset[str]:
    """Every field name the exporter accepts (config/dcgm-fields.txt says where they come from)."""
    names = set()
    for line in FIELDS_PATH.read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            names.add(line.split()[0])
    return frozenset(names)


class CsvSyntaxError(ValueError):
    """What Go's encoding/csv reports, with the 1-based line it stops at."""

    def __init__(self, line: int, message: str):
        super().__init__(f"line {line}: {message}")
        self.line = line


def go_csv_records(text: str) -> list[tuple[int, list[str]]]:
    """(line number, fields) per record, as dcgm-exporter reads the file: Go's `encoding/csv`
    with `Comment = '#'` and nothing else changed. So `#` starts a comment only in column 0; an
    empty line is skipped but a whitespace-only line is a record; a field that starts with `"` is
    quoted (commas and `""` inside, may span lines, nothing but `,` or the line end after the
    closing quote); a `"` anywhere else is an error; every record must have as many fields as
    the first one. Raises CsvSyntaxError where ReadAll would stop."""
    lines = text.replace("\r\n", "\n").split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    records: list[tuple[int, list[str]]] = []
    expected: int | None = None
    i = 0
    while i < len(lines):
        start = i + 1
        line = lines[i]
        i += 1
        if line.startswith("#") or line == "":
            continue
        fields: list[str] = []
        pos = 0
        while True:
            if not line.startswith('"', pos):
                comma = line.find(",", pos)
                field = line[pos:] if comma < 0 else line[pos:comma]
                if '"' in field:
                    raise CsvSyntaxError(i, 'bare " in non-quoted field (quote the whole field, or drop the quote)')
                fields.append(field)
                if comma < 0:
                    break
                pos = comma + 1
                continue
            # Quoted field.
            value = ""
            pos += 1
            while True:
                close = line.find('"', pos)
                if close < 0:
                    if i >= len(lines):
                        raise CsvSyntaxError(start, 'extraneous or missing " in quoted-field (a quote is never closed)')
                    value += line[pos:] + "\n"
                    line = lines[i]
                    i += 1
                    pos = 0
                    continue
                value += line[pos:close]
                after = line[close + 1 : close + 2]
                if after == '"':
                    value += '"'
                    pos = close + 2
                    continue
                if after in ("", ","):
                    pos = close + 1
                    break
                raise CsvSyntaxError(i, 'extraneous or missing " in quoted-field (only a comma may follow a closing quote)')
            fields.append(value)
            if pos >= len(line):
                break
            pos += 1  # the comma
            if pos == len(line):
                fields.append("")
                break
        if expected is None:
            expected = len(fields)
        elif len(fields) != expected:
            raise CsvSyntaxError(
                i, f"{len(fields)} fields, need exactly 3: FIELD, type, help (the exporter's CSV reader stops here: "
                f"wrong number of fields, the first record has {expected})" + _field_hint(fields, line)
            )
        records.append((start, fields))
    return records


def _field_hint(fields: list[str], line: str) -> str:
    text = f": {line!r}"
    if not line.strip():
        return "; a line of only spaces is a record to the exporter: make it empty" + text
    if line.lstrip().startswith("#"):
        return "; '#' starts a comment only in the first column" + text
    if len(fields) > 3:
        return "; no comma inside the help text unless the help is quoted" + text
    return text


DEFAULT_METRICS_PATH = config_path("dcgm-default-metrics.txt")


@lru_cache(maxsize=1)
def default_fields() -> frozenset[str]:
    """The fields the exporter collects without a custom list (config/dcgm-default-metrics.txt)."""
    lines = DEFAULT_METRICS_PATH.read_text().splitlines()
    return frozenset(line.strip() for line in lines if line.strip() and not line.startswith("#"))


def csv_fields(text: str) -> frozenset[str]:
    """The field names a metrics CSV lists, read as the exporter reads it (a list the stack
    accepted always parses; an unparsable one lists nothing)."""
    try:
        return frozenset(fields[0].strip(" ") for _, fields in go_csv_records(text) if fields)
    except CsvSyntaxError:
        return frozenset()


def csv_errors(text: str) -> list[str]:
    """Every problem of a dcgm-exporter metrics CSV, as 'line N: ...' (empty when valid).

    The file is read as the exporter reads it (go_csv_records: it stops at the first syntax
    error), then each record is checked as its ExtractCounters does: spaces trimmed, exactly
    three fields, a field name it knows (config/dcgm-fields.txt), a Prometheus type for DCGM
    fields. Duplicates, an empty help and an empty list are refused as well (the exporter would
    serve duplicate series, an undocumented metric, or nothing)."""
    try:
        records = go_csv_records(text)
    except CsvSyntaxError as exc:
        return [str(exc)]
    errors: list[str] = []
    seen: dict[str, int] = {}
    known = known_fields()
    for number, raw in records:
        fields = [f.strip(" ") for f in raw]
        if len(fields) != 3:
            extra = "; no comma inside the help text unless the help is quoted" if len(fields) > 3 else ""
            errors.append(f"line {number}: {len(fields)} fields, need exactly 3: FIELD, type, help{extra}: {','.join(raw)!r}")
            continue
        name, kind, help_text = fields
        if name not in known:
            errors.append(
                f"line {number}: {name!r} is not a DCGM field name dcgm-exporter knows (DCGM_FI_..., DCGM_EXP_...; "
                f"the exporter fails with 'could not find DCGM field'; the list is in config/{FIELDS_PATH.name})"
            )
        if kind not in METRIC_TYPES:
            errors.append(f"line {number}: type {kind!r} must be one of {', '.join(METRIC_TYPES)}")
        if not help_text:
            errors.append(f"line {number}: the help text is empty")
        if name in seen:
            errors.append(f"line {number}: {name} is already listed on line {seen[name]}")
        seen.setdefault(name, number)
    if not records and not errors:
        errors.append("lists no metric (only comments or blank lines)")
    return errors


def metric_names(text: str) -> list[str]:
    """The field names of a metrics CSV that passed csv_errors, in order."""
    return [fields[0].strip(" ") for _, fields in go_csv_records(text)]
