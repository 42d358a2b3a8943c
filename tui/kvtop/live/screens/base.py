"""The one interface between the app and its screens, both ways.

Down: the app calls `show_state(state)` on every visible screen when its ViewState changes.
Up: a screen that wants something changed (another GPU selected, GPU detail opened, a request
length typed) posts one of the messages below; it bubbles to the app, which changes the state
and shows it again. Screens never import the app or each other.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

from textual.message import Message

if TYPE_CHECKING:  # the app imports this before its first frame, the view state after it
    from kvtop.live.view_state import ViewState


class ShowsState:
    """Mixed into a screen the app keeps current. The state arrives before or after mounting;
    `show` runs once both are there, and again at every change."""

    view_state: ViewState | None = None
    _mounted_once = False
    # The app's actions that do nothing on this view (compact on a view that has no compact
    # layout): the key bar leaves their keys out (the app's check_action).
    APP_ACTIONS_OFF: ClassVar[frozenset[str]] = frozenset()

    def show_state(self, state: ViewState) -> None:
        self.view_state = state
        if self._mounted_once:
            self.show(state)

    def show(self, state: ViewState) -> None:
        raise NotImplementedError

    def on_screen_resume(self) -> None:
        # Back on top (a screen above was closed): show what changed while covered.
        if self._mounted_once and self.view_state is not None:
            self.show(self.view_state)

    def _shown_on_mount(self) -> None:
        """Call from on_mount: the widgets exist from now on."""
        self._mounted_once = True
        if self.view_state is not None:
            self.show(self.view_state)


class SelectGpu(Message):
    """Select the GPU with this NVML index (the overview's row, the GPU in GPU detail)."""

    def __init__(self, gpu_index: int) -> None:
        super().__init__()
        self.gpu_index = gpu_index


class OpenGpuDetail(Message):
    """Open GPU detail on the selected GPU."""


class RequestLength(Message):
    """The request length the operator asks about (the formula's question), in tokens."""

    def __init__(self, tokens: int) -> None:
        super().__init__()
        self.tokens = tokens
