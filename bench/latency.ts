// Latency percentiles from each response's own time. autocannon times every response with hrtime, in
// fractional milliseconds, but its latency histogram counts whole milliseconds: a p99 of 1.0 ms
// and one of 1.9 ms both read 1, and the ratio of two such readings can be off by almost 2x,
// which is the size of the flood target itself. This keeps each 2xx response's own time (the
// responses autocannon's histogram counts) and takes percentiles from those.
import autocannon from 'autocannon'

export interface TimedLoad {
  result: autocannon.Result
  /** The p-th percentile (0-100, nearest rank) of the 2xx responses' times, in ms. */
  percentile(p: number): number
}

export function timedLoad(options: autocannon.Options): Promise<TimedLoad> {
  const times: number[] = []
  return new Promise((resolve, reject) => {
    const instance = autocannon(options, (error, result) => {
      if (error) return reject(error as Error)
      times.sort((a, b) => a - b)
      resolve({
        result,
        percentile: (p) => times[Math.min(times.length - 1, Math.max(0, Math.ceil((p / 100) * times.length) - 1))] ?? Number.NaN,
      })
    })
    instance.on('response', (_client, statusCode, _bytes, responseTime) => {
      if (statusCode >= 200 && statusCode < 300) times.push(responseTime)
    })
  })
}
