package plan

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestTenantPlanJob(t *testing.T) {
	tp := &TenantPlan{Jobs: make([]JobPlan, 2)}
	tp.Jobs[0].Job.Name, tp.Jobs[1].Job.Name = "asr", "chat"
	for _, tc := range []struct {
		name string
		want *JobPlan
	}{
		{"asr", &tp.Jobs[0]},
		{"chat", &tp.Jobs[1]},
		{"chta", nil},
		{"", nil},
	} {
		t.Run(tc.name, func(t *testing.T) { assert.Same(t, tc.want, tp.Job(tc.name)) })
	}
}
