package gateway

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"strings"
	"time"

	"github.com/miekg/dns"

	"github.com/sandboxd/sandboxd/netpolicy"
)

// dnsTTL is the time to live of the stub's answers: short, as the
// gateway resolves again at each connection.
const dnsTTL = 30

// serveDNS answers a task's query. A name no rule allows gets REFUSED and
// nothing is asked upstream; an allowed name's A query is resolved on the
// host's side and answered with the addresses the policy would let the
// task connect to; AAAA gets no answer (IPv6 goes nowhere); other types
// are refused.
func (g *Gateway) serveDNS(w dns.ResponseWriter, q *dns.Msg) {
	m := new(dns.Msg)
	m.SetReply(q)
	m.RecursionAvailable = true
	defer w.WriteMsg(m)
	s := g.bindingOf(w.RemoteAddr())
	if s == nil || len(q.Question) != 1 {
		m.Rcode = dns.RcodeRefused
		return
	}
	question := q.Question[0]
	name := normalize(question.Name)
	ev := netpolicy.Event{Time: time.Now().UTC(), Kind: "dns", Name: name, Via: "dns"}
	rule, ok := s.nameAllowed(name)
	if !ok {
		m.Rcode = dns.RcodeRefused
		ev.Reason = "no rule allows " + name
		s.record(ev)
		return
	}
	ev.Rule = rule.String()
	switch question.Qtype {
	case dns.TypeA:
	case dns.TypeAAAA:
		ev.Allowed, ev.Reason = true, "AAAA: IPv6 goes nowhere"
		s.record(ev)
		return
	default:
		m.Rcode = dns.RcodeRefused
		ev.Reason = dns.TypeToString[question.Qtype] + " queries are refused"
		s.record(ev)
		return
	}
	if reason, ok := s.mayLookUp(name); !ok {
		m.Rcode = dns.RcodeRefused
		ev.Reason = reason
		s.record(ev)
		return
	}
	addrs, err := g.resolve(context.Background(), name)
	if err != nil {
		m.Rcode = dns.RcodeServerFailure
		var dnsErr *net.DNSError
		if errors.As(err, &dnsErr) && dnsErr.IsNotFound {
			m.Rcode = dns.RcodeNameError
		}
		ev.Allowed, ev.Reason = true, "does not resolve: "+err.Error()
		s.record(ev)
		return
	}
	var answered, refused []netip.Addr
	var reason string
	for _, a := range addrs {
		if d := g.answerable(s, name, a, rule); d.Allowed {
			answered = append(answered, a)
		} else {
			refused, reason = append(refused, a), d.Reason
		}
	}
	if len(answered) == 0 {
		m.Rcode = dns.RcodeRefused
		ev.Addr, ev.Reason = joinAddrs(refused), reason
		s.record(ev)
		return
	}
	s.remember(name, answered)
	for _, a := range answered {
		m.Answer = append(m.Answer, &dns.A{
			Hdr: dns.RR_Header{Name: question.Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: dnsTTL},
			A:   a.AsSlice(),
		})
	}
	ev.Allowed, ev.Addr = true, joinAddrs(answered)
	if len(refused) > 0 {
		ev.Reason = "left out " + joinAddrs(refused) + ": " + reason
	}
	s.record(ev)
}

// answerable says whether the task could connect to a on any port of the
// rule that allowed the name: only such addresses are answered, so that a
// name that resolves to a denied address (rebinding) gets none.
func (g *Gateway) answerable(s *binding, name string, a netip.Addr, r netpolicy.Rule) netpolicy.Decision {
	var d netpolicy.Decision
	for _, port := range r.EffectivePorts() {
		if d = g.checker.Addr(s.pol(), name, a, port); d.Allowed {
			if g.isOwn(a) {
				return netpolicy.Decision{Reason: a.String() + " is this host's"}
			}
			return d
		}
	}
	if d.Reason == "" {
		d.Reason = strings.TrimSpace("no port of " + r.String())
	}
	return d
}
