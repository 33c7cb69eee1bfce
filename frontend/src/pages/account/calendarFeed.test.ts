import { describe, expect, it } from 'vitest'
import { feedAddress, parseWatched, webcalAddress } from './calendarFeed'

describe('parseWatched', () => {
  it('takes host:index separated by commas or spaces, each once', () => {
    expect(parseWatched(' node1:0, node1:1 node1:0,,node2:13 ')).toEqual({
      gpus: ['node1:0', 'node1:1', 'node2:13'],
      invalid: [],
    })
  })
  it('names what is not host:index', () => {
    expect(parseWatched('node1 node1:x :3 node2:1')).toEqual({ gpus: ['node2:1'], invalid: ['node1', 'node1:x', ':3'] })
  })
  it('is empty for an empty box', () => {
    expect(parseWatched('')).toEqual({ gpus: [], invalid: [] })
  })
})

describe('feedAddress', () => {
  const url = 'https://warden.lab/api/v1/calendar/abc.ics'
  it('is the address itself without watched GPUs', () => {
    expect(feedAddress(url, [])).toBe(url)
  })
  it('appends the watched GPUs, keeping the colons readable', () => {
    expect(feedAddress(url, ['node1:0', 'gpu box:2'])).toBe(`${url}?gpus=node1:0,gpu%20box:2`)
  })
  it('has a webcal: form for calendars that subscribe by link', () => {
    expect(webcalAddress(url)).toBe('webcal://warden.lab/api/v1/calendar/abc.ics')
    expect(webcalAddress('http://x/a.ics')).toBe('webcal://x/a.ics')
  })
})
