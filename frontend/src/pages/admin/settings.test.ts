import { describe, expect, it } from 'vitest'
import { smtpBody, sourceText, webhooksBody, type SmtpForm } from './settings'

const form: SmtpForm = { host: ' mail.lab ', port: '2525', security: 'none', username: '', password: '', mail_from: 'w@lab.example' }

describe('the Settings page', () => {
  it('leaves an empty password out, so the saved one is kept', () => {
    expect(smtpBody(form)).toEqual({ host: 'mail.lab', port: 2525, security: 'none', username: '', mail_from: 'w@lab.example' })
    expect(smtpBody({ ...form, password: 'pw' })).toMatchObject({ password: 'pw' })
  })

  it('says why a form cannot be sent', () => {
    expect(smtpBody({ ...form, host: ' ' })).toBe('The SMTP server is needed.')
    expect(smtpBody({ ...form, port: '99999' })).toMatch(/port/)
  })

  it('keeps a saved webhook URL when none is typed', () => {
    const rows = [{ name: 'lab', format: 'slack' as const, url: '', secret: '', hint: 'https://h/…' }]
    expect(webhooksBody(rows)).toEqual([{ name: 'lab', format: 'slack' }])
    expect(webhooksBody([{ ...rows[0], url: 'https://h/x' }])).toEqual([{ name: 'lab', format: 'slack', url: 'https://h/x' }])
  })

  it('names where a setting comes from', () => {
    expect(sourceText('settings')).toMatch(/Saved here/)
    expect(sourceText('file')).toMatch(/configuration file/)
    expect(sourceText('none')).toBe('Not set up.')
  })
})
