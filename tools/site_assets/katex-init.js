// Render the book's math with the vendored KaTeX (no network). Prose chapters reach here as
// pymdownx.arithmatex spans/divs holding \( \) or \[ \]; notebook markdown keeps Jupyter's $ and $$.
// Code blocks are skipped (KaTeX's auto-render ignores pre and code).
function renderBookMath() {
  renderMathInElement(document.body, {
    delimiters: [
      { left: "$$", right: "$$", display: true },
      { left: "\\[", right: "\\]", display: true },
      { left: "\\(", right: "\\)", display: false },
      { left: "$", right: "$", display: false },
    ],
    ignoredClasses: ["highlight", "highlight-ipynb"],
    throwOnError: false,
  });
}
if (typeof document$ !== "undefined") {
  document$.subscribe(renderBookMath); // Material's instant loading swaps pages without a reload
} else {
  document.addEventListener("DOMContentLoaded", renderBookMath);
}
