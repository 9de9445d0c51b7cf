"""The feature browser's navigation: `workbench app --store PATH` serves it (through `serve/streamlit_app.py`).

Run directly for development: `streamlit run app/main.py -- --store PATH` (AppTest runs this file too).
"""

from pathlib import Path

import streamlit as st

# Not "pages/": a pages folder next to the entry script switches Streamlit to its old file-based navigation,
# which ignores st.navigation (titles, icons, url paths).
PAGES_DIR = Path(__file__).with_name("page_scripts")


def main() -> None:
    """Configure the page and run the selected page script."""
    st.set_page_config(page_title="SAE workbench", page_icon="🔬", layout="wide")
    overview = st.Page(PAGES_DIR / "overview.py", title="Overview", icon="📊", url_path="overview")

    def home() -> None:
        """The root URL: the default page has no url path of its own, so it forwards to /overview (addressable)."""
        st.switch_page(overview)

    pages = [
        st.Page(home, title="Home", url_path="home", default=True, visibility="hidden"),
        overview,
        st.Page(PAGES_DIR / "feature.py", title="Feature", icon="🔎", url_path="feature"),
        st.Page(PAGES_DIR / "search.py", title="Search", icon="🧭", url_path="search"),
        st.Page(PAGES_DIR / "playground.py", title="Playground", icon="⌨️", url_path="playground"),
        st.Page(PAGES_DIR / "compare.py", title="Compare", icon="⚖️", url_path="compare"),
        st.Page(PAGES_DIR / "families.py", title="Families", icon="🧬", url_path="families"),
    ]
    st.navigation(pages).run()


if __name__ == "__main__":
    main()
