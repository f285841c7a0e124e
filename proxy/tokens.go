package proxy

import (
	"context"
	"net/http"
	"time"

	"github.com/edgegate/gateway/limiter"
	"github.com/edgegate/gateway/subject"
)

// DefaultInvalidTokenPolicy is the budget of invalid bearer tokens a
// client address has when Config.InvalidTokenPolicy is nil: 10 a minute.
// It is one value for the life of the process, so a reload keeps its
// counts and the denials the limiter remembers for it.
var DefaultInvalidTokenPolicy = func() *limiter.Policy {
	p := limiter.NewPolicy("invalid-token", limiter.FixedWindow)
	p.Limit, p.Window = 10, time.Minute
	return p
}()

// tokenBudget charges the invalid bearer tokens a client sends to one
// policy, its subject the client's address (subject.Resolver's
// ClientSubject: one budget across routes, shared across instances on
// Redis). A client over it is refused 429 before any of its next token is
// decoded: the limiter's standing denial answers without a round trip, so
// the refusal costs what any 429 costs. A valid token costs nothing here.
type tokenBudget struct {
	limiter  Limiter
	limits   *limits
	deadline time.Duration
	evalIDs  *evaluationIDs
}

// tokenBudgetSpent is the error the gate ends Resolve with: the client is
// over its budget of invalid tokens.
type tokenBudgetSpent struct {
	client   subject.Subject
	decision limiter.Evaluated
}

func (e *tokenBudgetSpent) Error() string { return "over the budget of invalid tokens" }

// AdmitToken refuses a client whose budget of invalid tokens stands
// spent; it never charges.
func (b *tokenBudget) AdmitToken(_ context.Context, client subject.Subject) error {
	if client.Pseudonym == "" {
		return nil
	}
	e, ok := b.limiter.StandingDenial(b.request(client.Pseudonym, time.Time{}))
	if !ok || e.Allowed {
		return nil
	}
	return &tokenBudgetSpent{client: client, decision: e}
}

func (b *tokenBudget) request(pseudonym string, start time.Time) limiter.Request {
	req := limiter.Request{Policies: b.limits.set, Subject: pseudonym, Cost: 1}
	if !start.IsZero() {
		req.EvaluationID, req.NewID, req.Deadline = b.evalIDs.next(), true, start.Add(b.deadline)
	}
	return req
}

// charge counts one invalid token of r's client and reports the denial
// when the client is over its budget. A limiter that cannot decide
// charges nothing and refuses nothing: the token is refused anyway.
func (b *tokenBudget) charge(r *http.Request, in subject.Inbound) (subject.Subject, limiter.Evaluated, bool) {
	client := in.ClientSubject()
	if client.Pseudonym == "" {
		return client, limiter.Evaluated{}, false
	}
	o := b.limiter.Evaluate(r.Context(), b.request(client.Pseudonym, time.Now()))
	e, ok := o.(limiter.Evaluated)
	if !ok || e.Allowed {
		return client, limiter.Evaluated{}, false
	}
	return client, e, true
}

// refuse answers a client over its budget of invalid tokens: 429 with the
// policy's RateLimit headers, as any denial.
func (b *tokenBudget) refuse(w http.ResponseWriter, client subject.Subject, e limiter.Evaluated, x *exchange) {
	x.outcome, x.reason = "denied", "invalid_token_budget"
	x.subjectKind, x.pseudonym = client.Kind, client.Pseudonym
	b.limits.setHeaders(w.Header(), e)
	writeQuotaExceeded(w, b.limits.problem(e), e.RetryAfter)
}
