package budget

import (
	"sync"
	"testing"
)

func TestHoldsAddUpToTheBudget(t *testing.T) {
	b := New(100, 10)
	a := b.Hold(60)
	if a == nil || b.Hold(50) != nil {
		t.Fatal("a hold of 50 was given with 40 left")
	}
	a.Shrink(10)
	c := b.Hold(90)
	if c == nil {
		t.Fatal("a hold of 90 was refused with 90 left")
	}
	a.Release()
	a.Release() // once only
	c.Release()
	if !b.Take(100) {
		t.Fatal("the budget did not come back whole")
	}
}

func TestConcurrentHoldsNeverOverdraw(t *testing.T) {
	b := New(1000, 64)
	var wg sync.WaitGroup
	for range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 1000 {
				if h := b.Hold(100); h != nil {
					h.Shrink(7)
					h.Release()
				}
			}
		}()
	}
	wg.Wait()
	if !b.Take(1000) || b.Take(1) {
		t.Fatal("the budget is not whole after every hold was released")
	}
}

func TestCallsAreCounted(t *testing.T) {
	b := New(1000, 2)
	x, y := b.Hold(1), b.Hold(1)
	if x == nil || y == nil || b.Hold(1) != nil {
		t.Fatal("a third call held with two allowed")
	}
	x.Release()
	if z := b.Hold(1); z == nil {
		t.Fatal("a released call did not come back")
	}
}
