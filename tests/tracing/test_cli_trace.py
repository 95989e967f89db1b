"""``--trace`` on the commands: ``flowcore run --trace`` emits the run's spans to the
global tracer provider (what ``opentelemetry-instrument`` configures)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

FLOW = """\
flow: traced-cli
tools: {lookup: {class: readonly}}
steps:
  - {id: look, call_tool: {tool: lookup, input: 1}}
output: "${steps.look.output}"
"""

TOOLS = """\
def lookup(call):
    return {"found": call.input}

TOOLS = {"lookup": lookup}
"""


def run_cli(tmp_path: Path, *flags: str) -> list[str]:
    (tmp_path / "flow.yaml").write_text(FLOW)
    (tmp_path / "tools.py").write_text(TOOLS)
    script = textwrap.dedent(
        f"""
        import json
        from opentelemetry import trace
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
        from flowcore_cli.main import run

        exporter = InMemorySpanExporter()
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        trace.set_tracer_provider(provider)
        code = run(["run", "flow.yaml", "--tools", "tools.py", "--db", "t.db", *{flags!r}])
        names = sorted(s.name for s in exporter.get_finished_spans())
        print(json.dumps({{"code": code, "spans": names}}))
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["code"] == 0, done.stderr
    spans: list[str] = result["spans"]
    return spans


def test_run_with_trace_emits_the_runs_spans(tmp_path: Path) -> None:
    spans = run_cli(tmp_path, "--trace")
    assert len(spans) == 2 and any("lookup" in name for name in spans), spans


def test_run_without_trace_emits_none(tmp_path: Path) -> None:
    assert run_cli(tmp_path) == []
