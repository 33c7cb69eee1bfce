import { describe, expect, it } from 'vitest'
import { SeenEvents } from './seen'

describe('events seen on the live stream', () => {
  it('lets each event id through once, and events without one always', () => {
    const seen = new SeenEvents()
    expect(seen.first('a')).toBe(true)
    expect(seen.first('b')).toBe(true)
    expect(seen.first('a')).toBe(false) // sent again by another gateway replica
    expect(seen.first('')).toBe(true)
    expect(seen.first(undefined)).toBe(true)
  })
  it('forgets the oldest ids beyond its capacity', () => {
    const seen = new SeenEvents(2)
    for (const id of ['a', 'b', 'c']) expect(seen.first(id)).toBe(true)
    expect(seen.first('a')).toBe(true) // forgotten
    expect(seen.first('c')).toBe(false)
  })
})
