"""Shared drawing for the chapters' box-and-arrow figures: boxes (x, y, w, h, text, highlighted) and arrows."""


def svg(boxes, arrows, width: int, height: int) -> str:
    """An SVG document with rounded boxes (highlighted ones in amber) and arrow lines between points."""
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="sans-serif" '
           'font-size="12">',
           '<defs><marker id="a" markerWidth="8" markerHeight="8" refX="7" refY="4" orient="auto">'
           '<path d="M0,0 L8,4 L0,8 z" fill="#555"/></marker></defs>']
    for x, y, w, h, text, hi in boxes:
        out.append(f'<rect x="{x}" y="{y}" width="{w}" height="{h}" rx="6" fill="{"#ffe9b3" if hi else "#eef3fb"}" stroke="#557"/>')
        out.append(f'<text x="{x + w / 2}" y="{y + h / 2 + 4}" text-anchor="middle">{text}</text>')
    for (x1, y1), (x2, y2) in arrows:
        out.append(f'<line x1="{x1}" y1="{y1}" x2="{x2}" y2="{y2}" stroke="#555" marker-end="url(#a)"/>')
    return "\n".join(out + ["</svg>"]) + "\n"
