import { describe, expect, it } from 'vitest'
import {
  openingScrollTop,
  pastPercent,
  addDays, atMinutes, blockPlacement, blockedSpans, dateKey, dragRange, gpuLabel, minutesInDay,
  parseDateKey, parseGpuQuery, startOfWeek, weekDays, yToMinutes,
} from './calendar'

describe('calendar days', () => {
  it('starts the week on Monday', () => {
    const sat = new Date(2026, 10, 21, 18, 42)
    expect(dateKey(startOfWeek(sat))).toBe('2026-11-16')
    expect(dateKey(startOfWeek(new Date(2026, 10, 16, 0, 0)))).toBe('2026-11-16')
    expect(dateKey(startOfWeek(new Date(2026, 10, 22, 23, 59)))).toBe('2026-11-16')
  })
  it('lists seven local days', () => {
    const days = weekDays(new Date(2026, 10, 30))
    expect(days.map(dateKey)).toEqual([
      '2026-11-30', '2026-12-01', '2026-12-02', '2026-12-03', '2026-12-04', '2026-12-05', '2026-12-06',
    ])
  })
  it('parses only real dates', () => {
    expect(dateKey(parseDateKey('2026-02-28')!)).toBe('2026-02-28')
    expect(parseDateKey('2026-02-30')).toBeNull()
    expect(parseDateKey('yesterday')).toBeNull()
    expect(parseDateKey(undefined)).toBeNull()
  })
  it('adds days by the wall clock', () => {
    expect(dateKey(addDays(new Date(2026, 11, 31), 1))).toBe('2027-01-01')
    expect(atMinutes(new Date(2026, 10, 23), 9 * 60 + 30).getHours()).toBe(9)
    expect(dateKey(atMinutes(new Date(2026, 10, 23), 1440))).toBe('2026-11-24')
  })
})

describe('drag geometry', () => {
  const H = 960 // 40 px an hour
  it('maps y linearly over 24 h, clamped', () => {
    expect(yToMinutes(0, H)).toBe(0)
    expect(yToMinutes(360, H)).toBe(9 * 60)
    expect(yToMinutes(-5, H)).toBe(0)
    expect(yToMinutes(2000, H)).toBe(1440)
  })
  it('snaps a drag to 30 minutes, start down and end up', () => {
    expect(dragRange(362, 438, H)).toEqual({ start: 540, end: 660 }) // 09:03 → 10:57
    expect(dragRange(360, 440, H)).toEqual({ start: 540, end: 660 })
  })
  it('accepts an upward drag', () => {
    expect(dragRange(440, 360, H)).toEqual({ start: 540, end: 660 })
  })
  it('is at least one slot long and stays inside the day', () => {
    expect(dragRange(365, 366, H)).toEqual({ start: 540, end: 570 })
    expect(dragRange(959, 960, H)).toEqual({ start: 1410, end: 1440 })
    expect(dragRange(960, 960, H)).toEqual({ start: 1410, end: 1440 })
  })
})

describe('block placement', () => {
  const day = new Date(2026, 10, 23)
  it('places a block by its local times', () => {
    const p = blockPlacement(new Date(2026, 10, 23, 9), new Date(2026, 10, 23, 12), day)!
    expect(p.top).toBeCloseTo(37.5)
    expect(p.height).toBeCloseTo(12.5)
    expect(p.clippedTop || p.clippedBottom).toBe(false)
  })
  it('clips a block that runs over midnight', () => {
    const s = new Date(2026, 10, 23, 22)
    const e = new Date(2026, 10, 24, 2)
    const a = blockPlacement(s, e, day)!
    expect(a.top).toBeCloseTo((22 / 24) * 100)
    expect(a.height).toBeCloseTo((2 / 24) * 100)
    expect(a.clippedBottom).toBe(true)
    const b = blockPlacement(s, e, addDays(day, 1))!
    expect(b.top).toBe(0)
    expect(b.height).toBeCloseTo((2 / 24) * 100)
    expect(b.clippedTop).toBe(true)
  })
  it('leaves out other days and touching intervals', () => {
    expect(blockPlacement(new Date(2026, 10, 22, 20), new Date(2026, 10, 23, 0), day)).toBeNull()
    expect(blockPlacement(new Date(2026, 10, 25, 1), new Date(2026, 10, 25, 2), day)).toBeNull()
  })
  it('reads minutes within a day', () => {
    expect(minutesInDay(new Date(2026, 10, 23, 8, 30), day)).toBe(510)
    expect(minutesInDay(new Date(2026, 10, 22, 8), day)).toBe(0)
    expect(minutesInDay(new Date(2026, 10, 25, 8), day)).toBe(1440)
  })
  it('turns not-allowed runs into shaded spans of a day', () => {
    const gridStart = new Date(2026, 10, 23) // 30-min slots from Monday 00:00
    const runs = [
      { first: 0, count: 16, state: 'not_allowed' }, // 00:00-08:00
      { first: 16, count: 20, state: 'free' },
      { first: 36, count: 12 + 48, state: 'not_allowed' }, // 18:00 - Tue 24:00
    ]
    const mon = blockedSpans(runs, gridStart, 30, day)
    expect(mon.map((s) => [Math.round(s.top * 24) / 100, Math.round(s.height * 24) / 100])).toEqual([
      [0, 8],
      [18, 6],
    ])
    const tue = blockedSpans(runs, gridStart, 30, addDays(day, 1))
    expect(tue).toHaveLength(1)
    expect(tue[0]!.height).toBeCloseTo(100)
  })
})

describe('labels and query', () => {
  it('names GPUs', () => {
    expect(gpuLabel({ host: 'sim-001', index: 0 })).toBe('sim-001 GPU 0')
  })
  it('reads the gpus query', () => {
    expect(parseGpuQuery('a,b, ,a')).toEqual(['a', 'b'])
    expect(parseGpuQuery(undefined)).toEqual([])
    expect(parseGpuQuery(['a,b', 'c'])).toEqual(['a', 'b', 'c'])
  })
})

describe('the calendar opens on now and shades the past', () => {
  const friday = new Date(2026, 10, 27, 19, 30) // a Friday, 19:30 local

  it('shades whole past days, today up to now, and nothing ahead', () => {
    expect(pastPercent(new Date(2026, 10, 26), friday)).toBe(100)
    expect(pastPercent(new Date(2026, 10, 27), friday)).toBeCloseTo((19.5 / 24) * 100)
    expect(pastPercent(new Date(2026, 10, 28), friday)).toBe(0)
  })

  it('puts the now-line a third of the way down the view, else 08:00', () => {
    // 40 px an hour, a 300 px view: 12:00 is at 480 px, shown 100 px below the top
    expect(openingScrollTop(true, new Date(2026, 10, 27, 12, 0), 40, 300)).toBe(380)
    expect(openingScrollTop(false, friday, 40, 300)).toBe(320)
    // early in the morning: the top of the day; late at night: its bottom
    expect(openingScrollTop(true, new Date(2026, 10, 27, 1, 0), 40, 600)).toBe(0)
    expect(openingScrollTop(true, new Date(2026, 10, 27, 23, 50), 40, 600)).toBe(960 - 600)
  })
})
