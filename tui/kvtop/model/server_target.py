"""Which SGLang server kvtop scrapes, why that one, and whether the API key goes with it.

The key goes only where the user sent it: to the URL given with --url, or to a loopback
address. A URL built from the log's server_args is the log's say, and one line in a log or a
journal can be written by a less trusted process: it gets the key only when it is loopback.
"""

from __future__ import annotations

from dataclasses import dataclass

# Where the URL came from (the JSON report's server.url_source).
FROM_FLAG = "--url"
FROM_CONFIG = "config.toml"
FROM_LOG = "log server_args"
FROM_DEFAULT = "default loopback"

_WHY = {
    FROM_FLAG: "from --url",
    FROM_CONFIG: "from the config file's url (config.toml)",
    FROM_LOG: "from the log's server_args",
    FROM_DEFAULT: "SGLang's default port on loopback: no --url and no port in the log",
}


@dataclass(frozen=True, slots=True)
class ServerTarget:
    url: str
    url_source: str  # FROM_FLAG, FROM_CONFIG, FROM_LOG or FROM_DEFAULT
    loopback: bool  # the host is a loopback address (127.0.0.0/8, ::1) or localhost
    key_given: bool  # --api-key-file or SGLANG_API_KEY named a key
    contacted: bool  # metrics are on (not --no-metrics)

    @property
    def key_allowed(self) -> bool:
        """The user named this URL, or it is loopback."""
        return self.url_source != FROM_LOG or self.loopback

    @property
    def api_key_sent(self) -> bool:
        return self.contacted and self.key_given and self.key_allowed

    @property
    def key_withheld(self) -> bool:
        """A key was given but this URL may not have it."""
        return self.key_given and not self.key_allowed

    def sentence(self) -> str:
        """The URL, why it, and what happens to the key: for the report and the help screen."""
        text = f"{self.url} ({_WHY.get(self.url_source, self.url_source)})"
        if not self.contacted:
            text += ", not contacted (--no-metrics)"
        if self.key_withheld:
            return f"{text}; {self.withheld_sentence()}"
        if not self.key_given:
            return f"{text}; no API key given."
        return f"{text}; the API key is sent to /server_info." if self.contacted else text + "."

    def withheld_sentence(self) -> str:
        verb = "is not sent" if self.contacted else "would not be sent"
        return (
            f"the API key {verb} to {self.url}: that address comes from the log's server_args "
            "and is not loopback. Give --url with the server's address to send the key there."
        )
