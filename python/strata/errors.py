"""Errors: a strata status as a Python exception, and the library that cannot be found."""
from ._types import Status


class StrataError(Exception):
    """A strata call returned an error status.

    status is the Status member (its .name is the C enum name, e.g. "STRATA_ERR_INVALID"),
    call the C function that returned it, text the library's text for the status
    (strata_status_string), and message why this call failed: the error the library logged
    for it (strata_get_last_error), with the bad value, the rank or the call to make
    instead; "" where it logged none. str() holds all of them.
    """

    def __init__(self, status, call, text, message=""):
        try:
            self.status = Status(status)
            name = self.status.name
        except ValueError:  # a status this package does not know: a newer library
            self.status = int(status)
            name = f"status {status}"
        self.name = name
        self.call = call
        self.text = text
        self.message = message
        super().__init__(f"{call}: {name}: {text}" + (f": {message}" if message else ""))


class LibraryNotFoundError(OSError):
    """libstrata could not be found or loaded (see strata.library_path())."""


class LibraryVersionError(OSError):
    """The libstrata found is a version whose structs this package does not mirror."""
