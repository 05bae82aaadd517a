package problem

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestListSortsDeduplicatesAndFormats(t *testing.T) {
	var l List
	assert.NoError(t, l.Err())
	l.Add("tenants/b.yaml", "spec.x", "1", "is %d", 2)
	l.Add("tenants/a.yaml", "", "one object per file", "file holds %d YAML documents", 2)
	l.Add("tenants/b.yaml", "spec.x", "1", "is %d", 2)
	err := l.Err()
	assert.Equal(t, "2 problems:\n"+
		"  tenants/a.yaml: file holds 2 YAML documents; expected one object per file\n"+
		"  tenants/b.yaml: spec.x: is 2; expected 1", err.Error())
	assert.Len(t, Problems(fmt.Errorf("wrapped: %w", err)), 2)

	var one List
	one.Add("f", "field", "", "broken")
	assert.Equal(t, "f: field: broken", one.Err().Error())
	assert.Nil(t, Problems(fmt.Errorf("plain")))
}
