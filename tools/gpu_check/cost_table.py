"""The papers' cost: the GPU hours of every table at paper scale from the measured steps
(tools/gpu_hours.py), and that cost as docs/tables.md shows it (`--cost-table FILE`)."""

from __future__ import annotations

from pipeline.errors import PipelineError
from tools.gpu_check.modes import EVALUATOR_ITEM, ROOT

COST_ITEMS = ("pretrain_bert_64x32", "tncse_bert_64x64", "jtcse6_bert_64x64", "distill_bert_64x32", "tncse_roberta_256x64")
COST_BASIS = {"pretrain": "pretrain_bert_64x32", "tncse": "tncse_bert_64x64", "jtcse-6": "jtcse6_bert_64x64",
              "distill": "distill_bert_64x32", "tncse@roberta": ("tncse_roberta_256x64", "tncse_roberta_256x64_checkpointed")}


def measured_costs(throughput: dict, device: str, precision: str) -> "MeasuredCosts | str":
    """The measured steps and evaluator speed as `tools.gpu_hours` prices them (the RoBERTa twin's plain step
    when it fit, else the checkpointed one: the paper preset trains it plain); a string saying what is missing."""
    from tools.gpu_hours import MeasuredCosts, StepTiming

    steps = {}
    for kind, items in COST_BASIS.items():
        for item in (items,) if isinstance(items, str) else items:
            record = throughput.get(item, {})
            if "step_seconds" in record:
                steps[kind] = StepTiming(record["step_seconds"], record["batch_size"], record["max_length"])
                break
    evaluator = throughput.get(EVALUATOR_ITEM, {})
    if "sentences_per_s" not in evaluator:
        return "the evaluator was not measured: it is the basis of every evaluation's cost"
    return MeasuredCosts(steps, evaluator["sentences_per_s"], evaluator["sentences"], precision, device)


def _basis(throughput: dict) -> dict[str, str]:
    """Which measured item each step kind is priced from."""
    basis = {}
    for kind, items in COST_BASIS.items():
        found = [item for item in ((items,) if isinstance(items, str) else items) if "step_seconds" in throughput.get(item, {})]
        if found:
            basis[kind] = found[0]
    return basis


def cost_record(throughput: dict, device: str, precision: str) -> dict:
    """GPU hours per table from the measured steps (tools.gpu_hours)."""
    from tools.gpu_hours import paper_cost

    measured = measured_costs(throughput, device, precision)
    if isinstance(measured, str):
        return {"error": measured}
    try:
        cost = paper_cost(measured, ROOT / "tables.yaml", ROOT / "conf", ROOT / "dvc.yaml")
    except PipelineError as error:
        return {"error": str(error), "basis": _basis(throughput)}
    return {"basis": _basis(throughput), **cost}


def cost_markdown(report: dict) -> str:
    """The measured GPU hours of every table as docs/tables.md shows them (`--cost-table FILE`)."""
    cost = report["cost"]
    if "tables" not in cost:
        raise PipelineError(f"the report has no cost: {cost.get('error', 'not measured')}")
    machine = report["machine"]
    where = (machine.get("gpu") or {}).get("model") or "a CPU (the CPU mode: not the papers' cost)"
    lines = [f"Measured on {where}, {report['created'][:10]} (training steps in {cost['precision']}; "
             f"{cost['gpu_hours_total']} GPU hours in all, MTEB suites excluded):", "",
             "| table id | runs | GPU hours it adds | GPU hours of its runs alone |", "|---|---|---|---|"]
    for table_id, table in cost["tables"].items():
        lines.append(f"| `{table_id}` | {len(table['runs'])} | {table['gpu_hours_added']:g} | {table['gpu_hours_needed']:g} |")
    runs = ", ".join(f"{backbone} {breakdown['total']:g}" for backbone, breakdown in cost["per_run"].items())
    lines += ["", f"One whole run (every stage): {runs} GPU hours."]
    return "\n".join(lines)
