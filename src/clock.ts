/** Milliseconds since the epoch. Injected so tests can move time instead of sleeping. */
export interface Clock {
  now(): number
}

export const systemClock: Clock = { now: () => Date.now() }
