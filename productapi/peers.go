package productapi

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/inferplane/inferplane/inputsrepo"
)

// Replicas hand their writes to the one that pushed last (inputsrepo's Prepare and Submit):
// a replica prepares a write (applies it and runs the precommit check, the costly part) and
// posts the prepared change to the writer named in the inputs head's Inferplane-Writer trailer,
// whose writer puts it in its next push. So one replica pushes for all while the checks and the
// tenants' publishes stay spread over them, and no two replicas race for the branch. Nothing is
// a lock: a writer that dies or cannot be reached is not waited for (the write is pushed here,
// and this replica becomes the one the others follow); two replicas that both push meanwhile
// only race as they would without this, the remote's compare-and-swap deciding.
//
// The trailer names the writer's peer URL with an HMAC of it under the replicas' shared peer
// token: a replica posts a prepared change (and the token) only to a URL whose trailer was
// made by a holder of the token, never to one anyone with push access wrote in a commit.

// peerPath is where a replica takes prepared changes from its peers (outside /api/v1: not a
// customer's route, and not in the OpenAPI document).
const peerPath = "/internal/v1/inputs/submit"

// followFor is how long a writer is followed after its last commit: a writer idle longer than
// this (perhaps gone) is not posted to; the next write is pushed here.
const followFor = 30 * time.Second

// writerID is the trailer value naming this replica: its peer URL and the URL's HMAC.
func writerID(peerURL, token string) string {
	return peerURL + " " + peerMAC(peerURL, token)
}

func peerMAC(peerURL, token string) string {
	m := hmac.New(sha256.New, []byte(token))
	m.Write([]byte("inferplane-api-writer\x00" + peerURL))
	return hex.EncodeToString(m.Sum(nil)[:16])
}

// writerPeer is the URL of the replica to hand writes to, or "" to push them here: of the
// replicas whose commits this one has seen in the last followFor (itself included) and whose
// trailer carries a valid HMAC, the one whose URL sorts first. Every replica reads the same
// history, so they agree; once they do, only that one pushes, and it stays the one while it
// writes. When it stops (or dies, and posts to it fail), its commits age out and the next one
// takes over.
func (s *Server) writerPeer() string {
	if s.opts.PeerURL == "" || s.noFollowUntil.Load() > s.opts.Now().UnixNano() {
		return ""
	}
	best := s.opts.PeerURL
	for id := range s.opts.Inputs.Writers(s.opts.Now().Add(-followFor)) {
		peer, mac, ok := strings.Cut(id, " ")
		if !ok || peer >= best || !hmac.Equal([]byte(mac), []byte(peerMAC(peer, s.opts.PeerToken))) {
			continue
		}
		if u, err := url.Parse(peer); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			continue
		}
		best = peer
	}
	if best == s.opts.PeerURL {
		return ""
	}
	return best
}

// writeVia writes a change through the writer at peer: prepared here, submitted there. A
// prepared change whose tenant moved meanwhile is prepared again on a fetched head; a refusal
// decided on a head this replica had not just fetched is confirmed on a fetched one. When the
// peer cannot be reached, the change is submitted to this replica's own writer (it carries an
// idempotency key, so a submit whose answer was lost is found, not written twice).
// It returns the result and the commit the change was prepared on (the newest this replica has
// that the write's commit follows).
func (s *Server) writeVia(ctx context.Context, peer string, c inputsrepo.Change) (inputsrepo.Result, string, error) {
	if c.IdempotencyKey == "" {
		c.IdempotencyKey = "handed-over:" + rand.Text()
	}
	fresh := false
	for attempt := 1; ; attempt++ {
		p, replayed, err := s.opts.Inputs.Prepare(ctx, c, fresh)
		switch {
		case replayed != nil:
			return *replayed, replayed.Commit, nil
		case err != nil && !fresh && ctx.Err() == nil:
			fresh = true // confirm the refusal on the remote's head
			continue
		case err != nil:
			return inputsrepo.Result{}, "", err
		}
		res, err := s.submitTo(ctx, peer, p)
		var moved *inputsrepo.ReadsMovedError
		var unreachable *peerError
		switch {
		case errors.As(err, &moved) && attempt < 8:
			fresh = true
			continue
		case errors.As(err, &unreachable):
			s.log.Warn("inputs: the writer replica could not be reached; writing here", "writer", peer, "error", err)
			// Not followed for a while: this replica pushes, and the others follow it.
			s.noFollowUntil.Store(s.opts.Now().Add(followFor).UnixNano())
			return s.submitHere(ctx, p)
		}
		return res, p.Base, err
	}
}

// submitHere submits a prepared change to this replica's writer after the peer it was sent to
// could not be reached or its answer was lost. That peer may have pushed it all the same (its
// answer lost after the push): then the writer here finds the change's key, and the commit it
// finds is this request's own write, which nobody published (a peer only commits what it is
// handed). It is answered as written, not replayed (the client asked once), and the caller
// publishes the tenant from this replica's render, as for any handed-over write. The commit
// the peer made of this change holds the tenant as prepared (Holds: the peer took it only
// where the Reads were as prepared), so that render is the commit's. A key an earlier request
// wrote is found by Prepare, or by the peer when this replica had not fetched it yet; only when
// that peer's answer is lost too does this see it: the same request (key and request match),
// taken for this one when it left the tenant as this one would, a replay otherwise.
// The commit is known here (found or written by this replica's writer).
func (s *Server) submitHere(ctx context.Context, p inputsrepo.Prepared) (inputsrepo.Result, string, error) {
	res, err := s.opts.Inputs.Submit(ctx, p)
	if err != nil {
		return res, p.Base, err
	}
	if res.Replayed {
		holds, err := s.opts.Inputs.Holds(res.Commit, p)
		if err != nil {
			s.log.Warn("inputs: reading the commit a handed-over write found failed; answered as a replay", "commit", short(res.Commit), "error", err)
		}
		res.Replayed = !holds
	}
	return res, res.Commit, nil
}

// peerError is a peer that could not be asked (or did not answer): nothing is known of what
// it did.
type peerError struct{ err error }

func (e *peerError) Error() string { return "the writer replica: " + e.err.Error() }
func (e *peerError) Unwrap() error { return e.err }

// submitAnswer is what a replica answers a peer's submit: the write's result, or its refusal.
type submitAnswer struct {
	Result *submitResult `json:"result,omitempty"`
	// Refused: "reads-moved", "conflict", "key-reused", "busy" or "error", with its words.
	Refused string `json:"refused,omitempty"`
	Reason  string `json:"reason,omitempty"`
	Path    string `json:"path,omitempty"`
	Commit  string `json:"commit,omitempty"`
}

type submitResult struct {
	Commit    string   `json:"commit"`
	Replayed  bool     `json:"replayed,omitempty"`
	Unchanged bool     `json:"unchanged,omitempty"`
	Changed   []string `json:"changed,omitempty"`
	Attempts  int      `json:"attempts"`
	Batch     int      `json:"batch"`
}

// submitTo posts a prepared change to the writer at peer.
func (s *Server) submitTo(ctx context.Context, peer string, p inputsrepo.Prepared) (inputsrepo.Result, error) {
	body, err := json.Marshal(p)
	if err != nil {
		return inputsrepo.Result{}, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimSuffix(peer, "/")+peerPath, bytes.NewReader(body))
	if err != nil {
		return inputsrepo.Result{}, &peerError{err}
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+s.opts.PeerToken)
	resp, err := s.peerHTTP.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return inputsrepo.Result{}, ctx.Err()
		}
		return inputsrepo.Result{}, &peerError{err}
	}
	defer resp.Body.Close()
	var a submitAnswer
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&a); err != nil || resp.StatusCode != http.StatusOK {
		return inputsrepo.Result{}, &peerError{fmt.Errorf("%s: %s %v", peer, resp.Status, err)}
	}
	switch a.Refused {
	case "":
		if a.Result == nil {
			return inputsrepo.Result{}, &peerError{fmt.Errorf("%s: an answer without a result", peer)}
		}
		r := a.Result
		return inputsrepo.Result{Commit: r.Commit, Replayed: r.Replayed, Unchanged: r.Unchanged, Changed: r.Changed, Attempts: r.Attempts, Batch: r.Batch}, nil
	case "reads-moved":
		return inputsrepo.Result{}, &inputsrepo.ReadsMovedError{Path: a.Path}
	case "conflict":
		return inputsrepo.Result{}, &inputsrepo.ConflictError{Reason: a.Reason}
	case "key-reused":
		return inputsrepo.Result{}, &inputsrepo.KeyReusedError{Commit: a.Commit}
	case "busy":
		return inputsrepo.Result{}, inputsrepo.ErrBusy
	}
	return inputsrepo.Result{}, fmt.Errorf("the writer replica %s: %s", peer, a.Reason)
}

// takeSubmit is the peer route: a replica's prepared change, put on the branch by this
// replica's writer. Only a holder of the peer token may post.
func (s *Server) takeSubmit(w http.ResponseWriter, r *http.Request) {
	token, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if s.opts.PeerToken == "" || !ok || subtle.ConstantTimeCompare([]byte(token), []byte(s.opts.PeerToken)) != 1 {
		http.Error(w, "not a peer of this replica", http.StatusUnauthorized)
		return
	}
	var p inputsrepo.Prepared
	if err := json.NewDecoder(io.LimitReader(r.Body, 64<<20)).Decode(&p); err != nil {
		http.Error(w, "a prepared change: "+err.Error(), http.StatusBadRequest)
		return
	}
	res, err := s.opts.Inputs.Submit(r.Context(), p)
	var (
		a     submitAnswer
		moved *inputsrepo.ReadsMovedError
		ce    *inputsrepo.ConflictError
		kr    *inputsrepo.KeyReusedError
	)
	switch {
	case err == nil:
		a.Result = &submitResult{Commit: res.Commit, Replayed: res.Replayed, Unchanged: res.Unchanged, Changed: res.Changed, Attempts: res.Attempts, Batch: res.Batch}
		s.metrics.handedOver.Inc()
	case errors.As(err, &moved):
		a.Refused, a.Path = "reads-moved", moved.Path
	case errors.As(err, &ce):
		a.Refused, a.Reason = "conflict", ce.Reason
	case errors.As(err, &kr):
		a.Refused, a.Commit = "key-reused", kr.Commit
	case errors.Is(err, inputsrepo.ErrBusy):
		a.Refused = "busy"
	default:
		a.Refused, a.Reason = "error", err.Error()
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(a)
}
