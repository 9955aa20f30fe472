// nbconvert's notebook template always emits a <script src> for MathJax. Math on this site is
// rendered by the vendored KaTeX (katex-init.js, loaded on every page), so this file does nothing:
// it only keeps that tag from fetching MathJax from a CDN.
