"""Summary of a laid-out tree with the official checker's CSV columns (``results.py``
ResultExporter), as ``summary.csv``, ``summary.json``, ``summary.xlsx`` and a markdown table."""

from __future__ import annotations

import io
import re
import json
from pathlib import Path
from typing import Any

from mlharness.loadgen.mllog import METRICS, TOKEN_METRICS, parse_detail_log
from mlharness.rules import endpoints
from mlharness.rules.model import BenchmarkRules, Rules
from mlharness.files import write_bytes_atomic, write_json_atomic, write_text_atomic
from mlharness.submission.layout import Layout

COLUMNS = [
    "Organization", "Availability", "Division", "SystemType", "SystemName", "Platform", "Model",
    "MlperfModel", "Scenario", "Result", "Accuracy", "number_of_nodes", "host_processor_model_name",
    "host_processors_per_node", "host_processor_core_count", "accelerator_model_name",
    "accelerators_per_node", "total_accelerators", "Location", "framework", "operating_system",
    "notes", "compliance", "errors", "version", "inferred", "has_power", "Units",
    "weight_data_types", "design_power_watts", "PrivateID",
]
#: RESULT_FIELD_NEW and UNIT_DICT (constants.py); latencies are ns in the log, ms in the summary
RESULT = {s: (m.key, m.divisor, m.summary_unit) for s, m in METRICS.items()}


def rows(layout: Layout, rules: Rules) -> list[dict[str, Any]]:
    desc = json.loads((layout.base / "systems" / f"{layout.system}.json").read_text())
    out = []
    for e in layout.entries:
        bench = rules.benchmark(e.bench_dir)
        inferred = 0
        if e.format == "endpoints":
            value, div, unit, accuracy, inferred = _endpoints_row(e.path, e.scenario, bench, rules)
        else:
            log = parse_detail_log(e.path / "performance" / "run_1" / "mlperf_log_detail.txt").values
            acc_text = (e.path / "accuracy" / "accuracy.txt").read_text()
            key, div, unit = _result(bench, str(log.get("effective_scenario", e.scenario)))
            accuracy = _accuracy_column({b.metric: _raw_accuracy(acc_text, bench.accuracy_regex[
                b.metric]) for b in bench.accuracy_for(e.scenario)})
            value = log.get(key)
        measurements = json.loads((e.measurements_file or e.path / "measurements.json").read_text())
        power = e.performance.record.power if (e.path / "performance" / "power").is_dir() else None
        notes = desc.get("hw_notes", "")
        if desc.get("sw_notes"):
            notes = (notes + ". " if notes else "") + desc["sw_notes"]
        total: int | str
        try:
            total = int(desc.get("number_of_nodes", 0)) * int(desc.get("accelerators_per_node", 0))
        except ValueError:
            total = ""
        out.append({
            "Organization": layout.submitter,
            "Availability": desc.get("status", ""),
            "Division": layout.division,
            "SystemType": desc.get("system_type", ""),
            "SystemName": desc.get("system_name", ""),
            "Platform": layout.system,
            "Model": e.bench_dir,
            "MlperfModel": e.bench_dir,
            "Scenario": e.scenario,
            "Result": float(value) / div if value is not None else "",
            "Accuracy": accuracy,
            "number_of_nodes": desc.get("number_of_nodes", ""),
            "host_processor_model_name": desc.get("host_processor_model_name", ""),
            "host_processors_per_node": desc.get("host_processors_per_node", ""),
            "host_processor_core_count": desc.get("host_processor_core_count", ""),
            "accelerator_model_name": desc.get("accelerator_model_name", ""),
            "accelerators_per_node": desc.get("accelerators_per_node", ""),
            "total_accelerators": total,
            "Location": str((e.path / "performance" / "run_1").relative_to(layout.root)),
            "framework": desc.get("framework", ""),
            "operating_system": desc.get("operating_system", ""),
            "notes": notes,
            "compliance": layout.division,
            "errors": 0,
            "version": rules.checker_version,
            "inferred": inferred,
            "has_power": power is not None,
            "Units": unit,
            "weight_data_types": measurements.get("weight_data_types", ""),
            "design_power_watts": "",
            "PrivateID": "",
        })
        if power is not None:  # the checker's second row: the power metric in POWER_UNIT_DICT units
            out.append({**out[-1], "Result": power.get("metric", ""), "Units": power.get("unit", "")})
    return out


#: the checker's UNIT_DICT for a benchmark without SPECIAL_UNIT_DICT entries (qwen3-vl)
SAMPLE_UNITS = {"Offline": "Samples/s", "Server": "Queries/s", "Interactive": "Queries/s",
                "SingleStream": "Latency (ms)", "MultiStream": "Latency (ms)"}


def _endpoints_row(scen_dir: Path, directory: str, bench: BenchmarkRules,
                   rules: Rules) -> tuple[Any, float, str, str, int]:
    """Result, divisor, unit, accuracy column and ``inferred`` of an endpoints-format result,
    as the checker's performance check and results.py read them: the result field of the
    scenario its config names (``offline`` stays lower case, so the tokens/s overwrite applies
    in Server only), the first score as its JSON, and ``inferred`` 1 wherever that name differs
    from the directory's."""
    facts = endpoints.load(rules.round)
    perf = endpoints.read(scen_dir, "performance", facts)
    scores = endpoints.read(scen_dir, "accuracy", facts).scores
    effective = str(perf.values.get("effective_scenario", ""))
    checked = endpoints.checked_scenario(effective, directory)
    key = bench.result_fields.get(checked) or facts.result_field(checked) or ""
    value = perf.values.get(key)
    div = 1e6 if checked in ("SingleStream", "MultiStream") else 1.0
    unit = ("Tokens/s" if bench.uses_token_latencies and bench.result_fields else
            SAMPLE_UNITS.get(directory, ""))
    if bench.name == "llama3.1-8b-edge" and directory == "SingleStream":
        unit = "Latency (ms)"
    accuracy = (json.dumps(scores[0]).replace(",", " ").replace('"', "").replace("{", "")
                .replace("}", "").strip()) if scores else ""
    inferred = int(directory != effective and (effective, directory) != ("server", "interactive"))
    return value, div, unit, accuracy, inferred


def _result(bench: BenchmarkRules, scenario: str) -> tuple[str, float, str]:
    """A result's detail-log key, divisor and unit in LoadGen's ``scenario``: the scenario's
    usual one, or the benchmark's own (the checker's RESULT_FIELD_BENCHMARK_OVERWRITE and
    SPECIAL_UNIT_DICT): tokens/s in Offline and Server (Interactive's logs say Server), a
    latency in ms in llama3.1-8b-edge's SingleStream."""
    scenario = "Server" if scenario == "Interactive" else scenario
    key = bench.result_field(scenario)
    if key is None:
        return RESULT[scenario]
    token = TOKEN_METRICS.get(scenario)
    if token is not None and key == token.key:
        return (key, 1.0, token.summary_unit)
    return (key, METRICS[scenario].divisor, METRICS[scenario].summary_unit)


def _accuracy_column(found: dict[str, str | None]) -> str:
    """Several metrics as the checker's summary writes its accuracy dict: ``json.dumps`` with
    commas turned into spaces and the quotes and braces dropped (``ROUGE1: 38.9  ROUGE2: ...``)."""
    seen = {k: v for k, v in found.items() if v is not None}
    return (json.dumps(seen).replace(",", " ").replace('"', "").replace("{", "")
            .replace("}", "").strip())


def _raw_accuracy(text: str, pattern: str) -> str | None:
    """The metric as the checker reports it: the matched text, not a re-formatted float."""
    for line in text.splitlines():
        m = re.match(pattern, line)
        if m:
            return m.group(1)
    return None


def to_csv(table: list[dict[str, Any]]) -> str:
    """In the checker's own CSV style: a bare header, then every value in double quotes."""
    lines = [",".join(COLUMNS)]
    for row in table:
        lines.append(",".join('"' + str(row.get(c, "")).replace('"', "'") + '"' for c in COLUMNS))
    return "\n".join(lines) + "\n"


def to_markdown(table: list[dict[str, Any]]) -> str:
    cols = ["Division", "Platform", "Model", "Scenario", "Result", "Units", "Accuracy"]
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for row in table:
        cells = []
        for c in cols:
            v = row[c]
            cells.append(f"{v:.3f}" if isinstance(v, float) else str(v))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def to_xlsx(table: list[dict[str, Any]]) -> bytes:
    import xlsxwriter  # optional dependency (the "report" extra)

    buf = io.BytesIO()
    book = xlsxwriter.Workbook(buf, {"in_memory": True})
    sheet = book.add_worksheet("summary")
    bold = book.add_format({"bold": True})
    for col, name in enumerate(COLUMNS):
        sheet.write(0, col, name, bold)
    for r, row in enumerate(table, start=1):
        for col, name in enumerate(COLUMNS):
            value = row[name]
            sheet.write(r, col, value if isinstance(value, (int, float, bool)) else str(value))
    book.close()
    return buf.getvalue()


def write(layout: Layout, rules: Rules, out_dir: Path) -> dict[str, Path]:
    """Write the four summary files into ``out_dir``; returns their paths by kind."""
    table = rows(layout, rules)
    paths = {k: out_dir / f"summary.{k}" for k in ("csv", "json", "md")}
    write_text_atomic(paths["csv"], to_csv(table))
    write_json_atomic(paths["json"], table)
    write_text_atomic(paths["md"], to_markdown(table))
    try:
        data = to_xlsx(table)
    except ImportError:
        return paths
    paths["xlsx"] = out_dir / "summary.xlsx"
    write_bytes_atomic(paths["xlsx"], data)
    return paths
