package pace

import (
	"container/heap"
	"sync"
	"time"
)

// maxBudgets bounds the budgets a Transport keeps.
const maxBudgets = 1024

// budgets holds the Transport's budgets by key: at most maxBudgets, and the
// shared one. A new key, once there are maxBudgets, replaces the budget
// free the longest: one that no request uses and that holds nothing back,
// no Retry-After nor spent quota in force, since its last use or the end
// of that wait. A budget in use or in a wait is never forgotten. When
// every budget is, the new key draws on the shared budget (spill) instead,
// which keeps the waits every server drawing on it asked for, and holds
// them all back; while it holds them, every new key draws on it, so that
// none of them reaches a server that asked to wait. A key is found, and a
// budget forgotten, in O(log maxBudgets), never by a walk of them all.
type budgets struct {
	mu    sync.Mutex
	m     map[string]*budget
	free  freeBudgets // the budgets in m that no request uses
	spill *budget
}

// get returns key's budget at now, which the caller must put back.
func (bs *budgets) get(key string, now time.Time) *budget {
	bs.mu.Lock()
	defer bs.mu.Unlock()
	if b := bs.m[key]; b != nil {
		if b.idx >= 0 {
			heap.Remove(&bs.free, b.idx)
		}
		b.users++
		return b
	}
	if bs.spill != nil && bs.spill.end(now).After(now) || len(bs.m) >= maxBudgets && !bs.forget(now) {
		if bs.spill == nil {
			bs.spill = &budget{shared: true, idx: -1}
		}
		return bs.spill
	}
	if bs.m == nil {
		bs.m = make(map[string]*budget)
	}
	b := &budget{key: key, users: 1, idx: -1}
	bs.m[key] = b
	return b
}

// put gives back b, got at now; the shared budget is kept for good.
func (bs *budgets) put(b *budget, now time.Time) {
	if b.shared {
		return
	}
	bs.mu.Lock()
	defer bs.mu.Unlock()
	if b.users--; b.users == 0 {
		b.freeSince = b.end(now)
		heap.Push(&bs.free, b)
	}
}

// forget forgets the budget free the longest, if it is free at now, and
// reports whether it did.
func (bs *budgets) forget(now time.Time) bool {
	if bs.free.Len() == 0 {
		return false
	}
	bs.free.visited++
	if b := bs.free.b[0]; b.freeSince.After(now) {
		return false
	}
	b := heap.Pop(&bs.free).(*budget)
	delete(bs.m, b.key)
	return true
}

// freeBudgets is a heap of the budgets no request uses, the one free the
// longest first.
type freeBudgets struct {
	b       []*budget
	visited int // budgets looked at: one a comparison, one a try to forget; for tests
}

func (h *freeBudgets) Len() int { return len(h.b) }

func (h *freeBudgets) Less(i, j int) bool {
	h.visited++
	return h.b[i].freeSince.Before(h.b[j].freeSince)
}

func (h *freeBudgets) Swap(i, j int) {
	h.b[i], h.b[j] = h.b[j], h.b[i]
	h.b[i].idx, h.b[j].idx = i, j
}

func (h *freeBudgets) Push(x any) {
	b := x.(*budget)
	b.idx = len(h.b)
	h.b = append(h.b, b)
}

func (h *freeBudgets) Pop() any {
	n := len(h.b) - 1
	b := h.b[n]
	h.b[n], h.b = nil, h.b[:n]
	b.idx = -1
	return b
}
