package report

import "math"

// PoissonInterval is the exact (Garwood) two-sided confidence interval of a
// Poisson mean from one observed count k at confidence level conf (0.95 for
// 95 %): the lower bound is the mean under which P(X >= k) = (1-conf)/2 (0 for
// k = 0), the upper the mean under which P(X <= k) = (1-conf)/2. These are the
// limits of F. Garwood, "Fiducial limits for the Poisson distribution",
// Biometrika 28 (1936) 437-442, which are also chi2((1-conf)/2; 2k)/2 and
// chi2((1+conf)/2; 2k+2)/2; for k = 10 at 95 %, 4.795 and 18.390. They are
// found here by bisection on the Poisson distribution function, so no
// statistics package is needed. A negative k gives NaN bounds.
func PoissonInterval(k int, conf float64) (lo, hi float64) {
	if k < 0 || !(conf > 0 && conf < 1) {
		return math.NaN(), math.NaN()
	}
	tail := (1 - conf) / 2
	// Upper: P(X <= k; mu) falls from 1 as mu grows; find where it is tail.
	hi = solveDecreasing(func(mu float64) float64 { return poissonCDF(k, mu) }, tail, float64(k))
	if k == 0 {
		return 0, hi
	}
	// Lower: P(X >= k; mu) = 1 - P(X <= k-1; mu) = tail.
	lo = solveDecreasing(func(mu float64) float64 { return poissonCDF(k-1, mu) }, 1-tail, 0)
	return lo, hi
}

// poissonCDF is P(X <= k) for X Poisson with mean mu, summed in log space so
// that counts in the thousands do not overflow.
func poissonCDF(k int, mu float64) float64 {
	if mu <= 0 {
		return 1
	}
	sum, lmu := 0.0, math.Log(mu)
	for i := 0; i <= k; i++ {
		lg, _ := math.Lgamma(float64(i + 1))
		sum += math.Exp(-mu + float64(i)*lmu - lg)
	}
	return min(sum, 1)
}

// solveDecreasing finds mu >= from where f(mu) = target for f decreasing in
// mu, by bracketing then bisection to double precision.
func solveDecreasing(f func(float64) float64, target, from float64) float64 {
	lo, hi := from, max(2*from, 1)
	for f(hi) > target {
		lo, hi = hi, 2*hi
	}
	for range 200 {
		mid := (lo + hi) / 2
		if mid == lo || mid == hi {
			break
		}
		if f(mid) > target {
			lo = mid
		} else {
			hi = mid
		}
	}
	return (lo + hi) / 2
}

// sessionsPerHConf is the confidence of sessions_per_h's interval (figure
// error bars).
const sessionsPerHConf = 0.95

// SessionsPerHInterval is the exact Poisson 95 % interval (PoissonInterval) of
// the stage's completed-sessions count, scaled to an hour as SessionsPerH is
// (x 3600 / window s): in a window of a few minutes the count is a small
// integer, so stage-to-stage jumps of a few sessions are within it. It treats
// completions as a Poisson process; a closed loop completes sessions more
// regularly than that, so the interval errs wide. NaN without a window.
func (s *Summary) SessionsPerHInterval() (lo, hi float64) {
	w := s.WindowSeconds()
	if !(w > 0) || math.IsNaN(s.SessionsPerH) {
		return math.NaN(), math.NaN()
	}
	lo, hi = PoissonInterval(s.SessionsCompleted, sessionsPerHConf)
	return lo * 3600 / w, hi * 3600 / w
}
