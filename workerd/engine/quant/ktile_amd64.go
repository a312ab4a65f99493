package quant

//go:noescape
func q4KDot4AVX2(row *byte, nb int, q *[4]*int8, d *[4]*float32, sums32 *[4]*int16, lanes *[4][8]float32, mins *[4]float32)

//go:noescape
func q6KDot4AVX2(row *byte, nb int, q *[4]*int8, d *[4]*float32, lanes *[4][8]float32)

// kTileArgs checks that four Q8_K activations have nb super-blocks and
// returns their quants' and scales' first elements.
func kTileArgs(a *[4]*Act, nb int) (q [4]*int8, d [4]*float32, ok bool) {
	for i, x := range a {
		if len(x.D) != nb || len(x.Q) != nb*QKK {
			return q, d, false
		}
		q[i], d[i] = &x.Q[0], &x.D[0]
	}
	return q, d, true
}

// dotQ4Kx4 is dotQ4K of row with four activations of its length, bit for
// bit; ok is false without AVX2 or with activations of another length.
func dotQ4Kx4(row []byte, a *[4]*Act, out *[4]float32) bool {
	nb := len(a[0].D)
	if !haveAVX2 || nb == 0 {
		return false
	}
	_ = row[nb*q4KBytes-1]
	q, d, ok := kTileArgs(a, nb)
	if !ok {
		return false
	}
	var sums [4]*int16
	for i, x := range a {
		if len(x.Sums32) != nb*8 {
			return false
		}
		sums[i] = &x.Sums32[0]
	}
	var lanes [4][8]float32
	var mins [4]float32
	q4KDot4AVX2(&row[0], nb, &q, &d, &sums, &lanes, &mins)
	*out = addLanes4(mins, &lanes)
	return true
}

// addLanes4 adds each activation's eight lanes to its start value in
// lane order (dotQ4K's and dotQ6K's final sum), the four activations'
// sums interleaved: four independent chains of additions instead of one
// chain of 32.
func addLanes4(s [4]float32, l *[4][8]float32) [4]float32 {
	for j := 0; j < 8; j++ {
		s[0] += l[0][j]
		s[1] += l[1][j]
		s[2] += l[2][j]
		s[3] += l[3][j]
	}
	return s
}

// dotQ6Kx4 is dotQ6K of row with four activations of its length, bit for
// bit; ok is false without AVX2 or with activations of another length.
func dotQ6Kx4(row []byte, a *[4]*Act, out *[4]float32) bool {
	nb := len(a[0].D)
	if !haveAVX2 || nb == 0 {
		return false
	}
	_ = row[nb*q6KBytes-1]
	q, d, ok := kTileArgs(a, nb)
	if !ok {
		return false
	}
	var lanes [4][8]float32
	q6KDot4AVX2(&row[0], nb, &q, &d, &lanes)
	*out = addLanes4([4]float32{}, &lanes)
	return true
}
