/**
 * The data of the APO example: support tickets, each with the team that should handle it. The reward
 * is an exact match of the model's answer (trimmed, lower-cased, a final period dropped) with that team.
 */

export const TEAMS = ["billing", "technical", "account", "shipping"] as const;
export type Team = (typeof TEAMS)[number];

export interface Ticket {
  text: string;
  team: Team;
}

export const TICKETS: readonly Ticket[] = [
  { text: "I was charged twice for my subscription this month.", team: "billing" },
  { text: "The app crashes every time I open the settings page.", team: "technical" },
  { text: "I forgot my password and the reset email never arrives.", team: "account" },
  { text: "My parcel has been stuck in transit for ten days.", team: "shipping" },
  { text: "Can I get a refund for the annual plan I bought yesterday?", team: "billing" },
  { text: "Uploading a photo fails with error 500.", team: "technical" },
  { text: "Please change the email address on my profile.", team: "account" },
  { text: "The courier delivered my order to the wrong address.", team: "shipping" },
  { text: "Why does my invoice show VAT when I entered a VAT number?", team: "billing" },
  { text: "The website is very slow since your last update.", team: "technical" },
  { text: "I want to delete my account and all my data.", team: "account" },
  { text: "Do you ship to Norway, and how long does it take?", team: "shipping" },
  { text: "My card was declined although it has enough funds.", team: "billing" },
  { text: "Notifications stopped working on my Android phone.", team: "technical" },
  { text: "Someone logged into my account from another country.", team: "account" },
  { text: "The box arrived damaged and the item is broken.", team: "shipping" },
  { text: "How do I switch from monthly to yearly billing?", team: "billing" },
  { text: "The export to CSV produces an empty file.", team: "technical" },
  { text: "I cannot enable two-factor authentication.", team: "account" },
  { text: "Can I change the delivery date of my order?", team: "shipping" },
  { text: "I cancelled my plan but was still billed.", team: "billing" },
  { text: "Search returns no results for anything I type.", team: "technical" },
  { text: "Please merge my two accounts into one.", team: "account" },
  { text: "The tracking number you sent does not work.", team: "shipping" },
  { text: "I need a copy of last year's receipts for my accountant.", team: "billing" },
  { text: "The desktop app will not install on Windows 11.", team: "technical" },
  { text: "My username shows the wrong name after my marriage.", team: "account" },
  { text: "Only half of my order arrived.", team: "shipping" },
  { text: "Your price went up without notice; I want the old rate.", team: "billing" },
  { text: "Dark mode makes the text unreadable in the editor.", team: "technical" },
  { text: "I was locked out after too many login attempts.", team: "account" },
  { text: "Is express delivery available for my area?", team: "shipping" },
];

/** The team named by a reply, normalised for an exact match. */
export const normalise = (reply: string): string =>
  reply
    .trim()
    .toLowerCase()
    .replace(/[.!]+$/, "");

/** 1 when the reply names exactly the ticket's team, else 0. */
export const reward = (ticket: Ticket, reply: string): number => (normalise(reply) === ticket.team ? 1 : 0);

/** Two tickets of every three train, the third validates (22 and 10; both sets hold every team). */
export function split(tickets: readonly Ticket[] = TICKETS): { train: Ticket[]; val: Ticket[] } {
  return { train: tickets.filter((_, i) => i % 3 !== 2), val: tickets.filter((_, i) => i % 3 === 2) };
}
