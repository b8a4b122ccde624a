"""``python -m xmr.synth``: the same command as ``xmr synth`` (what ``ray job submit`` runs)."""

import typer

from xmr.logs import prepare_console
from xmr.synth.command import synth_command

app = typer.Typer(pretty_exceptions_enable=False, add_completion=False)
app.command()(synth_command)

if __name__ == "__main__":
    prepare_console()
    app()
