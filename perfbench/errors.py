"""User-facing errors: raised anywhere, printed by the CLI as one clear message, never a traceback."""


class UserError(Exception):
    """A problem with the user's input (config, path, run id, file). Exit code 2 by default."""

    exit_code = 2

    def __init__(self, message: str, *, exit_code: int | None = None):
        super().__init__(message)
        if exit_code is not None:
            self.exit_code = exit_code


class ConfigError(UserError):
    """A sweep config that does not validate. The message names the key and the value."""


class ProfileFormatError(UserError):
    """A profiler file that cannot be read. The message names the file and what is wrong."""

    def __init__(self, path, problem: str):
        super().__init__(f"{path}: {problem}")
        self.path = str(path)
        self.problem = problem
