package limiter

// A standing denial is one a backend can tell without charging anything
// and without a round trip: a caller that would spend real work on a
// request only to have the limiter refuse it (a signature check, say)
// asks first. No standing denial says nothing: only Evaluate decides.
