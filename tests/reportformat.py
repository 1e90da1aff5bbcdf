"""A report format of the user's own for ``lampe-eval report --import tests.reportformat``: ``scores-json``
writes ``scores.json``, one entry per task score, from what the report computed. Nothing else imports this
module (the report tests check that ``--format scores-json`` is unknown until it is imported)."""

from __future__ import annotations

import json
from pathlib import Path

from lampe_eval.report import REPORT_FORMATS, ReportFormat, ReportInputs


@REPORT_FORMATS.register("scores-json")
class ScoresJson(ReportFormat):
    files = ("scores.json",)

    def write(self, inputs: ReportInputs) -> list[Path]:
        path = inputs.out / "scores.json"
        rows = [
            {
                "model": s.model,
                "method": s.variant.method,
                "task": s.task,
                "length": s.length,
                "score": s.score,
            }
            for s in inputs.scores
        ]
        path.write_text(json.dumps(rows, sort_keys=True), encoding="utf-8")
        return [path]
