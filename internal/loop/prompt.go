package loop

// Request assembly: the prompt of a state's next model call, and the
// estimate of its input tokens that admission reserves.

// Request assembles the prompt for the state's next model call: the
// byte-stable prefix (system prompt, tool schemas, goal) first, then the
// transcript of the current trial (all of it, without a verifier).
func (e *Engine) Request(s *State) *Request {
	req, _ := e.request(s)
	return req
}

// request is Request with the estimate of its input tokens (see
// PromptCount). Both cost what the transcript grew by since the last call
// on this State, not its length: the messages, their bounds and their
// fingerprints are kept in the State's prompt cache (see promptCache).
func (e *Engine) request(s *State) (*Request, inputEstimate) {
	if s.Plan != nil {
		// The planner's and the solver's prompts are not the transcript
		// (plan.go, plan_accept.go): they are built and estimated whole.
		req := e.plan.planRequest(s)
		if s.Plan.Stage == StageSolving {
			req = e.plan.solveRequest(s)
		}
		return req, e.estimateFresh(s, req)
	}
	start := s.trialStart()
	if s.Context.compacted(start) {
		// Compacted messages are not the transcript's: built whole, and
		// estimated on the last count when they extend what it counted.
		req := e.context.request(s, start, len(s.Transcript))
		return req, e.estimateFresh(s, req)
	}
	p := &s.prompt
	if !p.fits(e, s, start) {
		*p = promptCache{by: e, model: e.active, start: start, msgs: make([]Message, 1, 1+len(s.Transcript)-start)}
		p.msgs[0] = e.goal
		if len(s.Transcript) > 0 {
			p.first = &s.Transcript[0]
		}
		if e.perMessage != nil {
			p.fps = append(make([]promptFP, 0, cap(p.msgs)), p.chain.next(e.prefixes[e.active].fp, &e.goal))
			p.bounds = append(make([]int64, 0, cap(p.msgs)), 0)
		}
	}
	// Each message is read in place: a copy whose address the estimator
	// takes would be allocated on every turn.
	for i := start + len(p.msgs) - 1; i < len(s.Transcript); i++ {
		m := &s.Transcript[i]
		p.msgs = append(p.msgs, *m)
		if e.perMessage != nil {
			p.tokens += e.perMessage.EstimateMessageTokens(m)
			p.fps = append(p.fps, p.chain.next(p.fps[len(p.fps)-1], m))
			p.bounds = append(p.bounds, p.tokens)
		}
	}
	// The full slice expression keeps a model that appends to the request
	// from writing into the cache.
	msgs := p.msgs[:len(p.msgs):len(p.msgs)]
	req := &Request{Model: e.cfg.Model.Name, System: e.system, Tools: e.offered, Messages: msgs, MaxOutputTokens: e.cfg.Model.MaxOutputTokens,
		EarlierAnswers: s.answersBefore(start), Output: e.outputSchema()}
	if e.perMessage == nil {
		return req, inputEstimate{tokens: e.estimator.EstimateInputTokens(req)}
	}
	return req, builtOn(s.Counted, e.prefixes[e.active].tokens+p.tokens, p.fps, p.bounds)
}

// estimateFresh is the input estimate of a request built afresh (the
// planner's or the solver's, whose prompts are not kept as they grow):
// built on the last count when it extends the counted request, as the
// transcript's is.
func (e *Engine) estimateFresh(s *State, req *Request) inputEstimate {
	full := e.estimator.EstimateInputTokens(req)
	if e.perMessage == nil || len(req.Messages) == 0 {
		return inputEstimate{tokens: full}
	}
	var chain fpChain
	fps := make([]promptFP, len(req.Messages))
	bounds := make([]int64, len(req.Messages))
	prev := fpStart(e.cfg.Model.Provider, req)
	for i := range req.Messages {
		m := &req.Messages[i]
		prev = chain.next(prev, m)
		fps[i] = prev
		if i > 0 {
			bounds[i] = bounds[i-1] + e.perMessage.EstimateMessageTokens(m)
		}
	}
	return builtOn(s.Counted, full, fps, bounds)
}

func (p *promptCache) fits(e *Engine, s *State, start int) bool {
	if p.by != e || p.model != e.active || p.start != start || len(p.msgs) == 0 || len(s.Transcript)-start < len(p.msgs)-1 {
		return false
	}
	if len(s.Transcript) == 0 {
		return p.first == nil
	}
	if p.first != &s.Transcript[0] {
		return false
	}
	// A copy of the State stepped on its own may have written the slot
	// after a shared prefix: the last cached message must still be there.
	if n := len(p.msgs) - 1; n > 0 {
		a, b := &p.msgs[n], &s.Transcript[start+n-1]
		return a.Role == b.Role && a.Turn == b.Turn && a.CallID == b.CallID && a.Content == b.Content && len(a.ToolCalls) == len(b.ToolCalls)
	}
	return true
}
