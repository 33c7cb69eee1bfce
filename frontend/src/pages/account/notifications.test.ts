import { describe, expect, it } from 'vitest'
import { changedKinds, kindLabel, parseLead, safeLinks, wantsSystemNotification } from './notifications'

const row = (kind: string, email = false, chat = false, browser = true) => ({ kind, email, chat, browser })

describe('notification preferences', () => {
  it('sends only the kinds whose channels changed', () => {
    const saved = [row('job_failed', true), row('job_finished')]
    const edited = [row('job_failed', false), row('job_finished')]
    expect(changedKinds(edited, saved)).toEqual([row('job_failed', false)])
    expect(changedKinds(saved, saved)).toEqual([])
  })

  it('takes lead times of 1 to 1440 whole minutes only', () => {
    expect(parseLead('10')).toBe(10)
    expect(parseLead(' 5 ')).toBe(5)
    expect(parseLead('0')).toBeNull()
    expect(parseLead('1441')).toBeNull()
    expect(parseLead('2.5')).toBeNull()
    expect(parseLead('')).toBeNull()
  })

  it('names kinds in words, unknown ones readably', () => {
    expect(kindLabel('job_failed')).toBe('My job failed')
    expect(kindLabel('new_kind')).toBe('new kind')
  })
})

describe('a notification in the page', () => {
  it('shows only http(s) links', () => {
    const note = {
      id: '1', user: 'alice', kind: 'reservation_idle', title: 't', text: 'x', at: '',
      links: [{ label: 'Keep', url: 'https://w/keep' }, { label: 'Bad', url: 'javascript:alert(1)' }],
    }
    expect(safeLinks(note)).toEqual([{ label: 'Keep', url: 'https://w/keep' }])
  })

  it('uses Web Notifications only when the user allowed them', () => {
    expect(wantsSystemNotification('granted')).toBe(true)
    expect(wantsSystemNotification('default')).toBe(false)
    expect(wantsSystemNotification(undefined)).toBe(false)
  })
})
