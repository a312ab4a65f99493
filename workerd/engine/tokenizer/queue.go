package tokenizer

// queue is a binary heap ordered by less (the least first), typed so
// that pushes do not box their items as container/heap would.
type queue[T any] struct {
	items []T
	less  func(a, b T) bool
}

func (q *queue[T]) Len() int { return len(q.items) }

func (q *queue[T]) reset() { q.items = q.items[:0] }

func (q *queue[T]) push(x T) {
	q.items = append(q.items, x)
	i := len(q.items) - 1
	for i > 0 {
		p := (i - 1) / 2
		if !q.less(q.items[i], q.items[p]) {
			break
		}
		q.items[i], q.items[p] = q.items[p], q.items[i]
		i = p
	}
}

func (q *queue[T]) pop() T {
	top := q.items[0]
	n := len(q.items) - 1
	q.items[0] = q.items[n]
	q.items = q.items[:n]
	for i := 0; ; {
		l := 2*i + 1
		if l >= n {
			break
		}
		m := l
		if r := l + 1; r < n && q.less(q.items[r], q.items[l]) {
			m = r
		}
		if !q.less(q.items[m], q.items[i]) {
			break
		}
		q.items[i], q.items[m] = q.items[m], q.items[i]
		i = m
	}
	return top
}
