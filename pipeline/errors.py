"""The one exception type that means "the user gave us something we cannot work with".

Stages catch it, print its message as a single line and exit with status 2; anything else is a
bug and keeps its traceback.
"""


class PipelineError(Exception):
    """A problem with input, configuration or environment that the user can fix.

    The message must name the thing (key, file, line, package) and say how to fix it.
    """
