package browser

import (
	_ "embed"
	"fmt"
	"strings"
)

// axeSource is axe-core's browser build, as its npm package ships it (hack/console-assets.sh
// copies it from the version console/web/package-lock.json pins; e2e/browser/axe holds its
// licence).
//
//go:embed axe/axe.min.js
var axeSource string

// AxeViolation is one rule axe-core found broken, with the elements that break it.
type AxeViolation struct {
	ID     string   `json:"id"`
	Impact string   `json:"impact"`
	Help   string   `json:"help"`
	Nodes  []string `json:"nodes"`
}

func (v AxeViolation) String() string {
	return fmt.Sprintf("%s (%s): %s\n    %s", v.ID, v.Impact, v.Help, strings.Join(v.Nodes, "\n    "))
}

// Axe runs axe-core in the page (injected through the DevTools protocol, which the page's CSP
// does not govern) with its default rules, WCAG 2 A and AA among them, and returns what it
// found broken.
func (p *Page) Axe() []AxeViolation {
	p.t.Helper()
	if !Eval[bool](p, `typeof window.axe === "object"`) {
		Eval[bool](p, axeSource+"\n;true")
	}
	return Eval[[]AxeViolation](p, `axe.run(document, {resultTypes: ["violations"]}).then((r) => r.violations.map((v) => ({
  id: v.id, impact: v.impact || "", help: v.help,
  nodes: v.nodes.map((n) => n.target.join(" ") + ": " + (n.failureSummary || "").replace(/\s+/g, " ")),
})))`)
}

// AssertAccessible fails the test on any serious or critical axe-core violation, and logs the
// minor and moderate ones.
func (p *Page) AssertAccessible(what string) {
	p.t.Helper()
	for _, v := range p.Axe() {
		switch v.Impact {
		case "serious", "critical":
			p.t.Errorf("%s: axe-core: %s", what, v)
		default:
			p.t.Logf("%s: axe-core (%s, not failing): %s", what, v.Impact, v)
		}
	}
}
