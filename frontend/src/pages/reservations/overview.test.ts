import { describe, expect, it } from 'vitest'
import {
  cellDescription, cellState, cellWidthFor, headerTicks, layoutRows, overviewRange, reservedSpans, rowAt, runAt,
  slotAt, spanText, findKnown, gpuRuns, indexReservations, HOST_ROW_HEIGHT, ROW_HEIGHT, type GridGpu,
} from './overview'

const gpu: GridGpu = {
  uuid: 'GPU-1',
  host: 'sim-001',
  index: 0,
  runs: [
    { first: 0, count: 8, state: 'not_allowed' },
    { first: 8, count: 2, state: 'mine', owner: 'alice', reservation_id: 7 },
    { first: 10, count: 4, state: 'free' },
    { first: 14, count: 3, state: 'taken', owner: 'bob', reservation_id: 9 },
    { first: 17, count: 7, state: 'free' },
  ],
}

describe('overview cells', () => {
  it('maps server states to drawn states', () => {
    expect(cellState('free')).toBe('free')
    expect(cellState('mine')).toBe('mine')
    expect(cellState('taken')).toBe('others')
    expect(cellState('not_allowed')).toBe('blocked')
    expect(cellState(undefined)).toBe('free')
  })
  it('finds the run of a slot', () => {
    expect(runAt(gpu.runs, 0)!.state).toBe('not_allowed')
    expect(runAt(gpu.runs, 7)!.state).toBe('not_allowed')
    expect(runAt(gpu.runs, 8)!.state).toBe('mine')
    expect(runAt(gpu.runs, 16)!.owner).toBe('bob')
    expect(runAt(gpu.runs, 23)!.state).toBe('free')
    expect(runAt(gpu.runs, 24)).toBeNull()
    expect(runAt([], 0)).toBeNull()
  })
  it('tells back-to-back bookings of one owner apart, each with its own title', () => {
    const start = new Date(2026, 10, 23)
    const at = (h: number) => new Date(2026, 10, 23, h).toISOString()
    const known = indexReservations([
      { id: 3, title: 'Warm-up', owner: 'bob', start: at(8), end: at(10), gpus: [{ uuid: 'GPU-2' }] },
      { id: 4, title: 'Sweep', owner: 'bob', start: at(10), end: at(13), gpus: [{ uuid: 'GPU-2' }] },
    ])
    // the server sends one run of bob's for 08:00-13:00, without an id
    const merged: GridGpu = { uuid: 'GPU-2', host: 'sim-001', index: 1, runs: [{ first: 8, count: 5, state: 'taken', owner: 'bob' }] }
    const spans = reservedSpans(merged, start, 60, known)
    expect(spans.map((s) => [s.title, s.start.getHours(), s.end.getHours()])).toEqual([['Warm-up', 8, 10], ['Sweep', 10, 13]])
    expect(spanText(spans[1]!)).toMatch(/^bob: Sweep /)
  })

  it('lists reserved spans with titles, not free or blocked ones', () => {
    const start = new Date(2026, 10, 23)
    const known = indexReservations([
      { id: 7, title: 'Training', owner: 'alice', start: new Date(2026, 10, 23, 8).toISOString(), end: new Date(2026, 10, 23, 10).toISOString(), gpus: [{ uuid: 'GPU-1' }] },
    ])
    const spans = reservedSpans(gpu, start, 60, known)
    expect(spans).toHaveLength(2)
    expect(spans[0]).toMatchObject({ state: 'mine', title: 'Training', owner: 'alice' })
    expect(spans[0]!.start.getHours()).toBe(8)
    expect(spans[0]!.end.getHours()).toBe(10)
    expect(spans[1]).toMatchObject({ state: 'others', title: null, reservationId: 9 })
    expect(spanText(spans[0]!)).toMatch(/^mine: Training /)
    expect(spanText(spans[1]!)).toMatch(/^bob: reservation 9 /)
  })
  it('names my runs, which come without an id, by overlapping reservations', () => {
    const start = new Date(2026, 10, 23)
    const mine: GridGpu = { ...gpu, runs: [{ first: 9, count: 2, state: 'mine', owner: null, reservation_id: null }] }
    const known = indexReservations([
      { id: 1, title: 'Other GPU', owner: 'alice', start: new Date(2026, 10, 23, 9).toISOString(), end: new Date(2026, 10, 23, 11).toISOString(), gpus: [{ uuid: 'GPU-9' }] },
      { id: 2, title: 'Mine', owner: 'alice', start: new Date(2026, 10, 23, 9).toISOString(), end: new Date(2026, 10, 23, 11).toISOString(), gpus: [{ uuid: 'GPU-1' }] },
    ])
    const spans = reservedSpans(mine, start, 60, known)
    expect(spans[0]).toMatchObject({ title: 'Mine', reservationId: 2, owner: 'alice' })
    expect(findKnown(known, 'GPU-1', null, new Date(2026, 10, 23, 12), new Date(2026, 10, 23, 13))).toBeNull()
  })
  it('merges a reservation split over adjacent runs', () => {
    const split: GridGpu = {
      ...gpu,
      runs: [
        { first: 0, count: 2, state: 'mine', reservation_id: 3 },
        { first: 2, count: 2, state: 'mine', reservation_id: 3 },
      ],
    }
    expect(reservedSpans(split, new Date(2026, 0, 1), 30)).toHaveLength(1)
  })
  it('describes a cell for the tooltip', () => {
    const t = new Date(2026, 10, 23, 14)
    const known = indexReservations([
      { id: 9, title: 'Eval', owner: 'bob', start: t.toISOString(), end: new Date(2026, 10, 23, 17).toISOString(), gpus: [{ uuid: 'GPU-1' }] },
    ])
    const text = cellDescription(gpu, runAt(gpu.runs, 14), t, 60, known)
    expect(text).toContain('sim-001 GPU 0')
    expect(text).toContain('reserved by others')
    expect(text).toContain('Eval')
    expect(text).toContain('bob')
    expect(cellDescription(gpu, runAt(gpu.runs, 2), t, 60, new Map())).toContain('not allowed')
  })
})

describe('overview layout', () => {
  const hosts = [
    { host: 'a', gpus: [gpu, { ...gpu, uuid: 'GPU-2', index: 1 }] },
    { host: 'b', gpus: [{ ...gpu, uuid: 'GPU-3', host: 'b' }] },
  ]
  it('stacks host headings and GPU rows', () => {
    const { rows, height } = layoutRows(hosts)
    expect(rows.map((r) => r.kind)).toEqual(['host', 'gpu', 'gpu', 'host', 'gpu'])
    expect(height).toBe(2 * HOST_ROW_HEIGHT + 3 * ROW_HEIGHT)
    expect(rows[3]!.top).toBe(HOST_ROW_HEIGHT + 2 * ROW_HEIGHT)
  })
  it('hit-tests rows and slots', () => {
    const { rows } = layoutRows(hosts)
    expect(rowAt(rows, 0)!.kind).toBe('host')
    const r = rowAt(rows, HOST_ROW_HEIGHT + ROW_HEIGHT + 1)!
    expect(r.kind === 'gpu' && r.gpu.uuid).toBe('GPU-2')
    expect(rowAt(rows, -1)).toBeNull()
    expect(rowAt(rows, 10_000)).toBeNull()
    expect(slotAt(0, 4, 10)).toBe(0)
    expect(slotAt(39.9, 4, 10)).toBe(9)
    expect(slotAt(40, 4, 10)).toBeNull()
    expect(slotAt(-1, 4, 10)).toBeNull()
  })
  it('fills the width but keeps cells visible', () => {
    expect(cellWidthFor(1000, 168, 60)).toBeCloseTo(1000 / 168)
    expect(cellWidthFor(1000, 8 * 7 * 48, 30)).toBe(2)
    expect(cellWidthFor(1000, 8 * 7 * 24, 60)).toBe(3)
  })
  it('spans whole weeks from today', () => {
    const { start, end } = overviewRange(new Date(2026, 10, 21, 18, 42), 8)
    expect(start.getHours()).toBe(0)
    expect(start.getDate()).toBe(21)
    expect(Math.round((end.getTime() - start.getTime()) / 86_400_000)).toBe(56)
  })
  it('puts day ticks at midnight and thins hour ticks to fit', () => {
    const start = new Date(2026, 10, 23)
    const wide = headerTicks(start, 60, 48, 30)
    expect(wide.days.map((d) => d.slot)).toEqual([0, 24])
    expect(wide.hourStep).toBe(1)
    const narrow = headerTicks(start, 30, 96, 2)
    expect(narrow.days.map((d) => d.slot)).toEqual([0, 48])
    expect(narrow.hourStep).toBeGreaterThanOrEqual(6)
  })
})

describe('gpuRuns', () => {
  it('reads compact cells over the labels as the full runs they stand for', () => {
    const labels = [
      ['free', null, null],
      ['mine', null, null],
      ['not_allowed', null, null],
      ['taken', 'bob', 7],
    ]
    expect(gpuRuns({ cells: [2, 3, 0, 2, 3, 4, 1, 1] }, labels)).toEqual([
      { first: 0, count: 3, state: 'not_allowed', owner: null, reservation_id: null },
      { first: 3, count: 2, state: 'free', owner: null, reservation_id: null },
      { first: 5, count: 4, state: 'taken', owner: 'bob', reservation_id: 7 },
      { first: 9, count: 1, state: 'mine', owner: null, reservation_id: null },
    ])
  })

  it('passes full runs through', () => {
    const runs = [{ first: 0, count: 5, state: 'free', owner: null, reservation_id: null }]
    expect(gpuRuns({ runs }, undefined)).toEqual(runs)
  })
})
