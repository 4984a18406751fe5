from stages.cli import app

app()
