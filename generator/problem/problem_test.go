package problem

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

func TestListSortsDeduplicatesAndFormats(t *testing.T) {
	var l List
	assert.NoError(t, l.Err())
	x := field.NewPath("spec", "x")
	l.Add("tenants/b.yaml", x, "1", "is %d", 2)
	l.Add("tenants/a.yaml", nil, "one object per file", "file holds %d YAML documents", 2)
	l.Add("tenants/b.yaml", x, "1", "is %d", 2)
	l.AddError("tenants/b.yaml", field.Invalid(x, 3, "must be 1"))
	l = append(l, Problem{File: "recipes/r.yaml", Line: 7, Err: field.Required(field.NewPath("model"), "must name the model")})
	err := l.Err()
	assert.Equal(t, "4 problems:\n"+
		"  recipes/r.yaml:7: model is missing: must name the model\n"+
		"  tenants/a.yaml: file holds 2 YAML documents; expected one object per file\n"+
		"  tenants/b.yaml: spec.x is 3: must be 1\n"+
		"  tenants/b.yaml: spec.x: is 2; expected 1", err.Error())
	assert.Len(t, Problems(fmt.Errorf("wrapped: %w", err)), 4)

	var one List
	one.Add("f", field.NewPath("field"), "", "broken")
	assert.Equal(t, "f: field: broken", one.Err().Error())
	assert.Nil(t, Problems(fmt.Errorf("plain")))
}
