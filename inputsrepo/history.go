package inputsrepo

import (
	"fmt"
	"strings"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/object"
)

// Entry is one commit of the inputs as a history shows it.
type Entry struct {
	Commit  string
	Author  Author
	When    time.Time
	Subject string
	// Trailers are the commit's trailers (Trailers).
	Trailers map[string]string
}

// History lists the commits of inputs commit from and its first parents, newest first, whose
// trailer key has value value (e.g. the commits of one tenant's quota and tier changes), at most
// max of them. The walk is bounded like every walk of the history; from must be fetched.
func (r *Repo) History(from, key, value string, max int) ([]Entry, error) {
	objs, err := r.fetched()
	if err != nil {
		return nil, err
	}
	if from == "" {
		return nil, nil // an empty repository
	}
	c, err := object.GetCommit(objs, plumbing.NewHash(from))
	if err != nil {
		return nil, fmt.Errorf("inputs commit %s: %w", from, err)
	}
	var out []Entry
	for n := 0; n < maxScan && len(out) < max; n++ {
		if tr := Trailers(c.Message); tr[key] == value {
			subject, _, _ := strings.Cut(c.Message, "\n")
			out = append(out, Entry{Commit: c.Hash.String(), Author: Author{Name: c.Author.Name, Email: c.Author.Email},
				When: c.Author.When, Subject: subject, Trailers: tr})
		}
		if len(c.ParentHashes) == 0 {
			break
		}
		if c, err = object.GetCommit(objs, c.ParentHashes[0]); err != nil {
			return nil, err
		}
	}
	return out, nil
}
