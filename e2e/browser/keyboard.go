package browser

import (
	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"
)

// Walk is what a keyboard walk found: every control a person could operate (focusable,
// rendered, not disabled or inert), those the Tab key reached, and those it did not.
type Walk struct {
	Controls, Reached, Unreachable []string
}

// markControls numbers every control of the page (data-kbwalk) and describes each.
const markControls = `(() => {
  const sel = 'a[href], area[href], button, input:not([type=hidden]), select, textarea, summary, iframe, [tabindex], [contenteditable=""], [contenteditable="true"]';
  const els = [...document.querySelectorAll(sel)].filter((e) =>
    !e.disabled && e.tabIndex >= 0 && !e.closest("[inert]") && e.checkVisibility({visibilityProperty: true}));
  return els.map((e, i) => {
    e.setAttribute("data-kbwalk", String(i));
    const label = (e.getAttribute("aria-label") || e.textContent || e.value || e.name || "").trim().replace(/\s+/g, " ").slice(0, 40);
    return e.tagName.toLowerCase() + (e.id ? "#" + e.id : "") + (label ? " \"" + label + "\"" : "");
  });
})()`

// KeyboardWalk presses Tab from the top of the page until the focus comes back round (or
// twice as many presses as there are controls) and says which controls it reached.
func (p *Page) KeyboardWalk() Walk {
	p.t.Helper()
	w := Walk{Controls: Eval[[]string](p, markControls)}
	Eval[bool](p, `document.activeElement && document.activeElement.blur(); window.scrollTo(0, 0); true`)
	seen := map[int]bool{}
	first := -1
	for range 2*len(w.Controls) + 2 {
		p.Do(chromedp.KeyEvent(kb.Tab))
		i := Eval[int](p, `(() => { const a = document.activeElement; const v = a && a.getAttribute("data-kbwalk"); return v === null || v === undefined ? -1 : Number(v); })()`)
		if i < 0 {
			continue
		}
		if i == first {
			break
		}
		if first < 0 {
			first = i
		}
		seen[i] = true
	}
	for i, c := range w.Controls {
		if seen[i] {
			w.Reached = append(w.Reached, c)
		} else {
			w.Unreachable = append(w.Unreachable, c)
		}
	}
	return w
}

// AssertKeyboardReachable fails the test for each control the Tab key does not reach.
func (p *Page) AssertKeyboardReachable(what string) {
	p.t.Helper()
	w := p.KeyboardWalk()
	if len(w.Controls) == 0 {
		p.t.Errorf("%s: the page has no control to reach", what)
	}
	for _, c := range w.Unreachable {
		p.t.Errorf("%s: not reachable by keyboard: %s", what, c)
	}
}
