"""Messages the broker holds back and delivers later: delay levels, the timer wheel,
transactions, redelivery."""
