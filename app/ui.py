"""Page helpers shared by every page: store guard, typed-error messages, SAE picker. No data access of its own."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import streamlit as st

from sae_workbench.app import commands, queries, render
from sae_workbench.app.main import PAGES_DIR
from sae_workbench.store.rows import SAERecord

T = TypeVar("T")


def page_script(name: str) -> str:
    """Absolute path of a page script, for `st.page_link`: a relative one would be resolved against the entry
    script's folder, which differs between `workbench app` (serve/) and `streamlit run app/main.py`."""
    return str(PAGES_DIR / f"{name}.py")


def page_setup() -> None:
    """Inject the token CSS once per run (pages call this first)."""
    st.markdown(render.CSS, unsafe_allow_html=True)


def require_store() -> str:
    """The served store path as a string; stops the page with instructions when none is configured."""
    path = queries.store_path()
    if path is None:
        st.error("No store configured. Start the app with `workbench app --store PATH`.")
        st.stop()
    return str(path)


def guarded(fn: Callable[..., T], *args: object, **kwargs: object) -> T:
    """Run a query; on a typed store error show what to do (and a Retry for a busy store), then stop the page."""
    try:
        return fn(*args, **kwargs)
    except queries.StoreNotFoundError as err:
        st.info(f"**Empty store.** {err}")
    except queries.StoreBusyError as err:
        st.warning(f"**The store is locked by a writer** (a job is committing). {err}")
        if st.button("Retry", key=f"retry-{fn.__name__}"):
            queries.clear_caches()
            st.rerun()
    except queries.NotIndexedError as err:
        st.info(f"**Not indexed yet.** {err}")
    except queries.FeatureOutOfRangeError as err:
        st.error(str(err))
    except queries.UnknownSAEError as err:
        st.error(str(err))
    except queries.StoreCorruptError as err:
        st.error(f"**Unreadable store.** {err}")
    except queries.WorkbenchError as err:
        st.error(f"{type(err).__name__}: {err}")
    st.stop()


def pick_sae(path: str) -> SAERecord:
    """Sidebar SAE selector (synced with the `sae` query parameter); stops with a note when the store has none."""
    saes = guarded(queries.list_saes, path)
    if not saes:
        st.info(
            "**The store has no SAEs yet.** Train one and index it:\n\n"
            f"`{commands.FILL_COMMANDS['sae']}`\n\n`{commands.FILL_COMMANDS['index']}`"
        )
        st.stop()
    ids = [s.sae_id for s in saes]
    wanted = st.query_params.get("sae", ids[0])
    matches = [i for i, s in enumerate(ids) if s.startswith(wanted)] if wanted else []
    index = matches[0] if matches else 0
    labels = {s.sae_id: f"{s.sae_id[:12]} · {s.model} · {s.hook} · {s.d_sae} features" for s in saes}
    chosen = st.sidebar.selectbox("SAE", ids, index=index, format_func=lambda i: labels[i], key="sae_select")
    if st.query_params.get("sae") != chosen:
        st.query_params["sae"] = chosen
    return saes[ids.index(chosen)]


def fill_note(what: str, key: str) -> None:
    """A note that a section is empty and which command fills it."""
    st.caption(f"No {what} in the store yet — fill with `{commands.FILL_COMMANDS[key]}`.")


def sidebar_footer() -> None:
    """The served store path, in the sidebar."""
    st.sidebar.caption(queries.environment_note())
