import { describe, expect, it } from 'vitest'
import { startSteps } from './gettingStarted'

const fresh = { hosts: 0, users: 1, alertsConfigured: false, reservations: 0 }

describe('startSteps', () => {
  it('has nothing done on a fresh install (the first admin alone)', () => {
    expect(startSteps(fresh).map((s) => [s.key, s.done])).toEqual([
      ['host', false],
      ['people', false],
      ['alerts', false],
      ['book', false],
    ])
  })

  it('ticks each step from its own state', () => {
    const done = (state: Partial<typeof fresh>) =>
      startSteps({ ...fresh, ...state }).filter((s) => s.done).map((s) => s.key)
    expect(done({ hosts: 1 })).toEqual(['host'])
    expect(done({ users: 2 })).toEqual(['people'])
    expect(done({ alertsConfigured: true })).toEqual(['alerts'])
    expect(done({ reservations: 1 })).toEqual(['book'])
  })
})
