import { describe, expect, it } from 'vitest'
import { affectedSummary, drainSpans, drains, parseIndices, windowText, type MaintenanceWindow } from './maintenance'

function window(patch: Partial<MaintenanceWindow> = {}): MaintenanceWindow {
  return {
    id: 1,
    host: 'dgx1',
    gpus: [0, 1],
    target: 'dgx1:0,1',
    start: new Date(2026, 11, 2, 8, 0).toISOString(),
    end: new Date(2026, 11, 2, 14, 0).toISOString(),
    reason: 'new fan',
    bookings: 'keep',
    stop_jobs: false,
    created_by: 'admin',
    created_at: new Date(2026, 11, 1).toISOString(),
    ended_by: null,
    status: 'scheduled',
    ...patch,
  }
}

describe('maintenance windows', () => {
  it('drain the GPUs they name, or every GPU of the host', () => {
    expect(drains(window(), { host: 'dgx1', index: 1 })).toBe(true)
    expect(drains(window(), { host: 'dgx1', index: 2 })).toBe(false)
    expect(drains(window(), { host: 'dgx2', index: 0 })).toBe(false)
    expect(drains(window({ gpus: null }), { host: 'dgx1', index: 7 })).toBe(true)
  })

  it('sit in the day column over their hours, with their reason', () => {
    const day = new Date(2026, 11, 2)
    const [span] = drainSpans([window()], { host: 'dgx1', index: 0 }, day)
    expect(span).toEqual({ id: 1, top: (8 / 24) * 100, height: (6 / 24) * 100, reason: 'new fan' })
    expect(drainSpans([window()], { host: 'dgx1', index: 3 }, day)).toEqual([])
    expect(drainSpans([window()], { host: 'dgx1', index: 0 }, new Date(2026, 11, 3))).toEqual([])
    // Open-ended: to the end of every later day.
    const open = drainSpans([window({ end: null })], { host: 'dgx1', index: 0 }, new Date(2026, 11, 9))
    expect(open).toEqual([{ id: 1, top: 0, height: 100, reason: 'new fan' }])
    expect(drainSpans([window({ status: 'removed' })], { host: 'dgx1', index: 0 }, day)).toEqual([])
  })

  it('say what they drain, until when and why', () => {
    expect(windowText(window({ end: null }), () => 'Wed 08:00')).toBe(
      'dgx1:0,1 drained from Wed 08:00 to further notice: new fan',
    )
  })

  it('read the GPUs field of the Drain dialog', () => {
    expect(parseIndices('')).toBeNull()
    expect(parseIndices(' all ')).toBeNull()
    expect(parseIndices('3, 0-1')).toEqual([0, 1, 3])
    expect(() => parseIndices('x')).toThrow(/Not a GPU index/)
    expect(() => parseIndices('3-1')).toThrow(/Not a range/)
  })

  it('sum up what became of the overlapped bookings', () => {
    expect(affectedSummary([])).toBe('No booking overlaps it.')
    const booking = {
      reservation_id: 3, owner: 'alice', title: 't', start: '', end: '', outcome: 'kept' as const, alternative: null, moved_to: null,
    }
    expect(affectedSummary([booking, { ...booking, reservation_id: 4, outcome: 'moved' as const, moved_to: 9 }])).toBe(
      '2 bookings overlap it (1 kept, 1 moved); 1 owner was told.',
    )
  })
})
