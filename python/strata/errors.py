"""Errors: a strata status as a Python exception, and the library that cannot be found."""
from ._types import Status


class StrataError(Exception):
    """A strata call returned an error status.

    status is the Status member (its .name is the C enum name, e.g. "STRATA_ERR_INVALID"),
    call the C function that returned it, and str() the library's text for the status
    (strata_status_string) after the call. The library has logged the details (the bad
    value, the peer that failed) on stderr, or to the handler of its log.
    """

    def __init__(self, status, call, text):
        try:
            self.status = Status(status)
            name = self.status.name
        except ValueError:  # a status this package does not know: a newer library
            self.status = int(status)
            name = f"status {status}"
        self.name = name
        self.call = call
        self.text = text
        super().__init__(f"{call}: {name}: {text}")


class LibraryNotFoundError(OSError):
    """libstrata could not be found or loaded (see strata.library_path())."""


class LibraryVersionError(OSError):
    """The libstrata found is a version whose structs this package does not mirror."""
