/* Search-result snippets without the page chrome.
 *
 * Sphinx builds each snippet from the page's [role="main"], which in sphinx-book-theme also
 * holds the article header (download/launch menus) and the previous/next links, so snippets
 * started with "....ipynb .md .pdf". Strip that chrome before Sphinx extracts the text.
 * Loaded on every page (html_js_files); it acts only where searchtools.js defines Search.
 */
(() => {
  const CHROME = ".bd-header-article, .prev-next-area, .bd-footer-article, .bd-sidebar-secondary";
  const patch = () => {
    if (typeof Search === "undefined" || !Search.htmlToText || Search.htmlToText.normedu) return;
    const original = Search.htmlToText;
    Search.htmlToText = (htmlString, anchor) => {
      const doc = new DOMParser().parseFromString(htmlString, "text/html");
      doc.querySelectorAll(CHROME).forEach((el) => el.remove());
      return original(doc.documentElement.outerHTML, anchor);
    };
    Search.htmlToText.normedu = true;
  };
  patch();
  document.addEventListener("DOMContentLoaded", patch);
})();
